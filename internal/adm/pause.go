package adm

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
)

func pauseCommand() *cli.Command {
	return &cli.Command{
		Name:  "pause",
		Usage: "hold the automation still while you work by hand (every unit changes nothing until 'etcdadm resume')",
		Description: `Writes ` + pause.Key + ` in the store. Until 'etcdadm resume', every unit reads
it before it changes anything and leaves things as they are, logging
"paused by WHO since WHEN: REASON": member join adds, replaces and founds no
member and acts on no restore, recovery or teardown (a host with data of its
own still gets its etcd started on it after a reboot); reconcile removes no
member; the version switcher starts no step; etcd-volume-attach takes no
expired volume over. The snapshot uploader keeps backing up, and the timers
keep running, so everything resumes by itself after 'etcdadm resume'.
'etcdadm status' shows the pause. Running pause again updates the reason.`,
		Flags: []cli.Flag{cliflags.Store(), &cli.StringFlag{Name: "reason", Usage: "why, for the others on call (shown by every unit and by status)"}},
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			p, err := pause.Set(c.Context, st, c.String("reason"), time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "automation %s\n", p)
			return nil
		},
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "resume",
		Usage: "let the automation act again after 'etcdadm pause'",
		Description: `Removes ` + pause.Key + `. Each unit acts at its timer's next run (start
etcd-member-join or etcd-reconcile by hand to act now).`,
		Flags: []cli.Flag{cliflags.Store()},
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			was, err := pause.Get(c.Context, st)
			if err != nil {
				return err
			}
			if _, err := pause.Clear(c.Context, st); err != nil {
				return err
			}
			if was == nil {
				fmt.Fprintln(c.App.Writer, "the automation was not paused; nothing changed")
				return nil
			}
			fmt.Fprintf(c.App.Writer, "resumed (paused by %s since %s); the units act at their next run\n", was.By, was.Since.UTC().Format(time.RFC3339))
			return nil
		},
	}
}
