package adm

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

func upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:      "upgrade",
		Usage:     "move the cluster to another etcd version (up, down one minor, or a patch); --abort returns the step in flight",
		ArgsUsage: " ",
		Description: `Plans the path from the spec's version to --to, checks it, and records it;
every host's etcd-version-switcher then moves its member, one member of the
cluster at a time, leader last, with a backup before each step and a
rollback if the member does not come up (systemctl start
etcd-version-switcher on a host starts its turn now instead of at the next
timer tick; etcdadm status shows the progress).

Refused, changing nothing: an unknown or unsupported version, a skipped
minor, a minor step from below its minimum patch (3.5.26 before 3.6, 3.6.11
before 3.7), a downgrade of more than one minor, a version the hosts cannot
get ('etcdadm release push' or 'release add' first), and a new target while
a rollout is unfinished. A refusal names every reason at once, in the order
to fix them: the path (a skipped minor, a downgrade of more than one minor),
then the minimum patches, then the releases the hosts cannot get.

--abort: the members of the step in flight go back to the version it
started from (a downgrade in progress is cancelled); steps already complete
stay. A failed rollout stays stopped until you abort it.

Exit codes: 0 recorded (or nothing to do), 1 failure, 2 refused.`,
		Flags: []cli.Flag{
			cliflags.Store(),
			&cli.StringFlag{Name: "to", Usage: "target etcd version, e.g. 3.6.16"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the plan, record nothing"},
			&cli.BoolFlag{Name: "abort", Usage: "return the members of the step in flight to where it started"},
		},
		Action: func(c *cli.Context) error {
			st, err := cliflags.OpenStore(c)
			if err != nil {
				return err
			}
			w := c.App.Writer
			if c.Bool("abort") {
				rec, err := rollout.RequestAbort(c.Context, st, time.Now())
				if err != nil {
					return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
				}
				fmt.Fprintf(w, "abort requested for the rollout %s (%s): the switchers return the members of the step in flight to where it started; watch with 'etcdadm status'\n", rollout.PathString(rec.Path), rec.State)
				return nil
			}
			if c.String("to") == "" {
				return cli.Exit("upgrade: pass --to VERSION (or --abort)", 2)
			}
			to, err := etcdversion.Parse(c.String("to"))
			if err != nil {
				return cli.Exit(fmt.Sprintf("upgrade: %v\nNothing was changed.", err), 2)
			}
			return declare(c, st, to, c.Bool("dry-run"))
		},
	}
}

// declare plans and records a target (upgrade and spec set --version).
func declare(c *cli.Context, st store.Store, to etcdversion.Version, dryRun bool) error {
	d, err := rollout.Declare(c.Context, st, to, dryRun, time.Now())
	if errors.Is(err, etcdversion.ErrRefused) || errors.Is(err, rollout.ErrRunning) {
		return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
	}
	if err != nil {
		return err
	}
	w := c.App.Writer
	switch {
	case d.Unchanged && len(d.Plan.Steps) == 0:
		fmt.Fprintf(w, "the cluster is declared at etcd %s already: nothing to do\n", to)
		return nil
	case d.Unchanged:
		fmt.Fprintf(w, "the rollout to %s is already recorded\n", to)
		return nil
	}
	fmt.Fprintf(w, "plan: %s\n", d.Plan.Path())
	for i, s := range d.Plan.Steps {
		fmt.Fprintf(w, "  step %d: %s\n", i+1, s)
		switch s.Kind {
		case etcdversion.MinorUp:
			fmt.Fprintf(w, "          cluster and storage version move to %s after the last member; until then the old binary is a valid rollback\n", s.To.MinorString())
		case etcdversion.MinorDown:
			fmt.Fprintf(w, "          etcd's downgrade API first (validate, enable, storage version %s on every member), then the binaries\n", s.To.MinorString())
		}
	}
	fmt.Fprintln(w, "each step, per member: one at a time in the cluster, non-leaders by name, the leader last;")
	fmt.Fprintln(w, "  gates: every member healthy and voting, no learner, quorum without it, a verified backup for the step;")
	fmt.Fprintln(w, "  then: binary swapped, etcd restarted, healthy + caught up + linearizable at the new version, or rolled back")
	if dryRun {
		fmt.Fprintln(w, "dry run: nothing recorded")
		return nil
	}
	p, err := pause.Get(c.Context, st)
	if err != nil {
		return err
	}
	if p != nil {
		fmt.Fprintf(w, "recorded: the spec says etcd %s, but the automation is %s: the version switchers move no member until then\n", to, p)
		return nil
	}
	fmt.Fprintf(w, "recorded: the spec says etcd %s; the hosts' etcd-version-switcher units move the members (etcdadm status shows progress)\n", to)
	return nil
}

func releaseCommand() *cli.Command {
	return &cli.Command{
		Name:  "release",
		Usage: "make an etcd version available to the hosts from the store (push, add, list)",
		Description: `A host runs a version it was baked with (/opt/etcd/vX.Y.Z) or fetches it from
the store's release, checking each file's sha256 before it can run.`,
		Subcommands: []*cli.Command{
			{
				Name:      "push",
				Usage:     "upload etcd, etcdctl and etcdutl of VERSION from --from DIR into the store (self-sufficient, air-gapped)",
				ArgsUsage: "VERSION",
				Flags:     []cli.Flag{cliflags.Store(), &cli.StringFlag{Name: "from", Required: true, Usage: "directory holding etcd, etcdctl and etcdutl"}},
				Action: func(c *cli.Context) error {
					v, st, err := releaseArgs(c)
					if err != nil {
						return err
					}
					m, err := etcdbin.Releases{Store: st}.Push(c.Context, v, c.String("from"), time.Now())
					if err != nil {
						return cli.Exit(err, 1)
					}
					for _, p := range etcdbin.Programs() {
						fmt.Fprintf(c.App.Writer, "%s  %s (%s)\n", m.Files[p].SHA256, p, humanBytes(m.Files[p].Size))
					}
					fmt.Fprintf(c.App.Writer, "release %s pushed to %s\n", v, st)
					return nil
				},
			},
			{
				Name:      "add",
				Usage:     "record where the hosts download VERSION (--url BASE/{etcd,etcdctl,etcdutl}) and its sha256 sums",
				ArgsUsage: "VERSION",
				Flags: []cli.Flag{cliflags.Store(),
					&cli.StringFlag{Name: "url", Required: true, Usage: "base URL of the directory holding etcd, etcdctl and etcdutl"},
					&cli.StringFlag{Name: "sha256-file", Required: true, Usage: "sha256sum output naming etcd, etcdctl and etcdutl"}},
				Action: func(c *cli.Context) error {
					v, st, err := releaseArgs(c)
					if err != nil {
						return err
					}
					if _, err := (etcdbin.Releases{Store: st}).Add(c.Context, v, c.String("url"), c.String("sha256-file"), time.Now()); err != nil {
						return cli.Exit(err, 2)
					}
					fmt.Fprintf(c.App.Writer, "release %s recorded: hosts download it from %s\n", v, c.String("url"))
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "the versions the hosts can get (store releases, and versions every registered host has)",
				Flags: []cli.Flag{cliflags.Store()},
				Action: func(c *cli.Context) error {
					st, err := cliflags.OpenStore(c)
					if err != nil {
						return err
					}
					vs, err := rollout.Available(c.Context, st)
					if err != nil {
						return err
					}
					for _, v := range vs {
						fmt.Fprintln(c.App.Writer, v)
					}
					return nil
				},
			},
		},
	}
}

func releaseArgs(c *cli.Context) (etcdversion.Version, store.Store, error) {
	if c.NArg() != 1 {
		return etcdversion.Version{}, nil, cli.Exit("release: name one VERSION, e.g. 3.6.16", 2)
	}
	v, err := etcdversion.Parse(c.Args().First())
	if err == nil {
		err = etcdversion.Supported(v)
	}
	if err != nil {
		return etcdversion.Version{}, nil, cli.Exit(err, 2)
	}
	st, err := cliflags.OpenStore(c)
	return v, st, err
}
