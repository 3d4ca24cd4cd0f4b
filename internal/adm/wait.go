package adm

import (
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
			last := time.Time{}
			err = etcdclient.WaitLinearizable(c.Context, cli3, c.Duration("timeout"), 500*time.Millisecond, func(err error) {
				if time.Since(last) > 30*time.Second {
					log.Info("waiting for etcd", "err", err)
					last = time.Now()
				}
			})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			fmt.Fprintln(c.App.Writer, "etcd is healthy")
			return nil
		},
	}
}
