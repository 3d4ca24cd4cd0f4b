package adm

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
)

func waitHealthyCommand() *cli.Command {
	return &cli.Command{
		Name:  "wait-healthy",
		Usage: "wait until etcd serves linearizable reads (etcd-wait-healthy.service runs it)",
		Description: `Exits 0 as soon as a linearizable read through --endpoints succeeds, 1 when
--timeout passes first. Order kube-apiserver after etcd-wait-healthy.service.`,
		Flags: append([]cli.Flag{
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up after this long"},
		}, etcdclient.Flags("https://127.0.0.1:2379")...),
		Action: func(c *cli.Context) error {
			log := cliflags.Logger(c).With("component", "wait-healthy")
			cli3, _, err := etcdClient(c)
			if err != nil {
				return err
			}
			defer cli3.Close()
			deadline := time.Now().Add(c.Duration("timeout"))
			last := time.Time{}
			for {
				ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
				_, err := cli3.Get(ctx, "health")
				cancel()
				if err == nil {
					fmt.Fprintln(c.App.Writer, "etcd is healthy")
					return nil
				}
				if time.Now().After(deadline) {
					return cli.Exit(fmt.Sprintf("etcd not healthy after %v: %v (see journalctl -u etcd)", c.Duration("timeout"), err), 1)
				}
				if time.Since(last) > 30*time.Second {
					log.Info("waiting for etcd", "err", err)
					last = time.Now()
				}
				select {
				case <-c.Context.Done():
					return c.Context.Err()
				case <-time.After(500 * time.Millisecond):
				}
			}
		},
	}
}
