package adm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/manual"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/memberflags"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/service/systemd"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// manualFlags are the flags init, join and reset share: the store (this
// host's own by default) and the member's identity, as the units take it.
func manualFlags(extra ...cli.Flag) []cli.Flag {
	return append(append([]cli.Flag{
		&cli.StringFlag{Name: "store", EnvVars: []string{"ETCDADM_STORE"}, Usage: "a shared store (with the automation); default: this host's own, file://" + manual.LocalStoreDir},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, EnvVars: []string{"ETCDADM_JOIN_TIMEOUT"}, Usage: "bound on every wait (etcd ready, caught up, promoted)"},
	}, memberflags.Flags()...), extra...)
}

func initCommand() *cli.Command {
	return &cli.Command{
		Name:  "init",
		Usage: "by hand: found a one-member cluster on this master (then 'etcdadm join' on the next)",
		Description: `On a master with our binaries and units: creates the cluster CA (or imports
--ca-cert/--ca-key), declares a one-member cluster, and runs member join as the
units do: it issues this member's certificates, writes /etc/etcd/etcd.env,
starts etcd.service over D-Bus and waits until it serves. Prints the
'etcdadm join' command for the next master and how to carry the CA there.

Without --store the state lives on this host (file://` + manual.LocalStoreDir + `), where
'etcdadm render --manual' points the units.
A second init on a host whose etcd runs reports it and changes nothing; after
a crash, run it again to finish. Exit codes: 0 done (or already), 1 failure,
2 refused.`,
		Flags: manualFlags(
			&cli.StringFlag{Name: "etcd-version", Usage: "etcd version to run (default: the one /opt/etcd/current points at)"},
			&cli.StringFlag{Name: "ca-cert", Usage: "an existing CA certificate (PEM) to use instead of a new CA"},
			&cli.StringFlag{Name: "ca-key", Usage: "its key (PEM), with --ca-cert"},
			&cli.StringFlag{Name: "cluster-name", Value: "etcd", Usage: "the cluster's name, in its token"},
		),
		Action: func(c *cli.Context) error {
			o := manual.InitOptions{Version: c.String("etcd-version"), ClusterName: c.String("cluster-name")}
			var err error
			if c.String("ca-cert") != "" || c.String("ca-key") != "" {
				if o.CACert, o.CAKey, err = readPair(c.String("ca-cert"), c.String("ca-key")); err != nil {
					return cli.Exit("init: "+err.Error()+"\nNothing was changed.", 2)
				}
			}
			h, err := openHost(c)
			if err != nil {
				return err
			}
			defer h.close()
			if o.Version == "" {
				v, err := etcdbin.HostDir(h.cfg.Root).Current()
				if err != nil {
					return cli.Exit(fmt.Sprintf("init: %v; pass --etcd-version", err), 2)
				}
				o.Version = v.String()
			}
			res, err := manual.Init(h.ctx, h.cfg, h.deps, o)
			if errors.Is(err, manual.ErrInitialized) || errors.Is(err, pki.ErrInvalid) || errors.Is(err, pki.ErrOtherCA) {
				return cli.Exit("init: "+err.Error(), 2)
			}
			if err != nil {
				return err
			}
			w := c.App.Writer
			if res.Already {
				fmt.Fprintf(w, "already initialized: %s\n", res.Reason)
				return nil
			}
			fmt.Fprintf(w, "%s: %s\n\n", res.Member.Name, res.Reason)
			printJoin(w, h, res.Member.ClientURL)
			return nil
		},
	}
}

// printJoin tells how the next master joins. The CA travels as two files
// the operator copies (scp, a secret store): no extra network endpoint
// that serves a CA key, and nothing that expires.
func printJoin(w interface{ Write([]byte) (int, error) }, h *host, endpoint string) {
	if h.local == "" {
		fmt.Fprintf(w, "To add a master, run on it (it reads the CA from the shared store):\n  etcdadm join %s --store %s\n", endpoint, h.deps.Store)
		return
	}
	dir := filepath.Join(h.local, filepath.Dir(pki.CACertKey))
	fmt.Fprintf(w, `To add a master: copy the cluster CA to it, readable by root only, e.g.
  ssh root@NEXT-MASTER install -d -m 0700 /root/etcd-ca
  scp %[1]s/ca.crt %[1]s/ca.key root@NEXT-MASTER:/root/etcd-ca/
then run there:
  etcdadm join %[2]s --ca-cert /root/etcd-ca/ca.crt --ca-key /root/etcd-ca/ca.key
and delete the copies afterwards (the CA key signs certificates for this cluster).
`, dir, endpoint)
}

func joinCommand() *cli.Command {
	return &cli.Command{
		Name:      "join",
		Usage:     "by hand: add this master to the cluster at ENDPOINT (the command 'etcdadm init' printed)",
		ArgsUsage: "https://HOST:2379",
		Description: `Adds this master as a learner, starts etcd with state existing, waits until it
has caught up and promotes it: member join's own join, the same code and
retries as etcd-member-join. Needs the cluster CA (--ca-cert and --ca-key,
copied from the first master), or a shared --store that holds it.

Refused, changing nothing (exit 2): the endpoint unreachable, a CA that did not
sign the cluster's certificates, a member down or a learner (another join in
progress), this host's name taken by a healthy member while this host holds no
data of it. After a crash, run it again.`,
		Flags: manualFlags(
			&cli.StringFlag{Name: "ca-cert", Value: "/root/etcd-ca/ca.crt", Usage: "the cluster CA's certificate (PEM), copied from the first master"},
			&cli.StringFlag{Name: "ca-key", Value: "/root/etcd-ca/ca.key", Usage: "the cluster CA's key (PEM)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("join: name one endpoint, e.g. 'etcdadm join https://10.0.0.1:2379' (what 'etcdadm init' printed)", 2)
			}
			h, err := openHost(c)
			if err != nil {
				return err
			}
			defer h.close()
			o := manual.JoinOptions{Endpoint: c.Args().First()}
			if h.local != "" || c.IsSet("ca-cert") {
				if o.CACert, o.CAKey, err = readPair(c.String("ca-cert"), c.String("ca-key")); err != nil {
					return cli.Exit("join: "+err.Error()+" (copy them from the first master; see what 'etcdadm init' printed)", 2)
				}
			} else if o.CACert, o.CAKey, err = storeCA(h.ctx, h.deps.Store); err != nil {
				return err
			}
			res, err := manual.Join(h.ctx, h.cfg, h.deps, o)
			if errors.Is(err, manual.ErrRefused) {
				return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s: %s: %s\n", res.Member.Name, res.Action, res.Reason)
			return nil
		},
	}
}

func resetCommand() *cli.Command {
	return &cli.Command{
		Name:  "reset",
		Usage: "by hand: take this master out of its cluster and make it blank again",
		Description: `Leaves the cluster (removes this member when the rest keeps its quorum), stops
etcd and our units, and moves aside (never deletes) the data directory's
member/, /etc/etcd/pki, /etc/etcd/etcd.env and this host's own store, each as
NAME.reset-TIME. The host can then 'etcdadm init' or 'etcdadm join' again.

Refused, changing nothing (exit 2): the removal would leave the rest without a
quorum, or the cluster cannot be reached. --force resets anyway: the rest may
then serve nothing until members come back (or 'etcdadm recover'), and an
unreachable cluster keeps this member listed ('etcdadm member remove NAME'
from a healthy member). The last member of a cluster ends it; its data is kept.`,
		Flags: manualFlags(&cli.BoolFlag{Name: "force", Usage: "reset even when the rest would lose its quorum or cannot be reached"}),
		Action: func(c *cli.Context) error {
			h, err := openHost(c)
			if err != nil {
				return err
			}
			defer h.close()
			o := manual.ResetOptions{Force: c.Bool("force"), LocalStore: h.local, Now: time.Now(), Stop: h.stop}
			res, err := manual.Reset(h.ctx, h.cfg, h.deps, o)
			if errors.Is(err, manual.ErrRefused) {
				return cli.Exit(fmt.Sprintf("%v\nNothing was changed.", err), 2)
			}
			w := c.App.Writer
			for _, wn := range res.Warnings {
				fmt.Fprintf(w, "WARNING: %s\n", wn)
			}
			if err != nil {
				return err
			}
			if res.Removed {
				fmt.Fprintf(w, "%s left the cluster\n", h.cfg.Name)
			}
			for _, a := range res.Aside {
				fmt.Fprintf(w, "moved aside: %s\n", a)
			}
			fmt.Fprintln(w, "this host is blank: 'etcdadm init' or 'etcdadm join' to use it again")
			return nil
		},
	}
}

// host is what init, join and reset act with.
type host struct {
	ctx    context.Context
	cancel context.CancelFunc
	cfg    member.Config
	deps   member.Deps
	local  string // this host's own store directory, "" with --store
	made   string // the outermost directory of local this command made
	svc    *systemd.Manager
}

// stop stops one unit over D-Bus.
func (h *host) stop(ctx context.Context, unit string) error {
	return (&systemd.Manager{Conn: h.svc.Conn, Unit: unit}).Stop(ctx)
}

// close ends the command. A refused command leaves no empty store
// directory behind (os.Remove removes only empty directories).
func (h *host) close() {
	h.svc.Conn.Close()
	h.cancel()
	for d := h.local; h.made != "" && len(d) >= len(h.made); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
}

func openHost(c *cli.Context) (*host, error) {
	cfg, err := memberflags.Config(c)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = c.Duration("timeout")
	h := &host{cfg: cfg}
	var st store.Store
	// render --manual names the host's own store in etcdadm.env: that is
	// the default, not a shared store.
	if u := c.String("store"); u != "" && u != ignition.ManualStore {
		st, err = cliflags.OpenStore(c)
	} else {
		h.local = filepath.Join(cfg.Root, manual.LocalStoreDir)
		h.made = firstMissing(h.local)
		if err = os.MkdirAll(h.local, 0o700); err == nil {
			st, err = filestore.New(h.local)
		}
	}
	if err != nil {
		return nil, cli.Exit(err, 2)
	}
	h.ctx, h.cancel = context.WithTimeout(c.Context, cfg.Timeout+time.Minute)
	if h.svc, err = systemd.New(h.ctx, c.String("unit")); err != nil {
		h.cancel()
		return nil, err
	}
	h.deps = member.Deps{Store: st, Service: h.svc, Log: cliflags.Logger(c).With("component", c.Command.Name), Now: time.Now}
	return h, nil
}

func readPair(certFile, keyFile string) (certPEM, keyPEM []byte, err error) {
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("give both --ca-cert and --ca-key")
	}
	if certPEM, err = os.ReadFile(certFile); err == nil {
		keyPEM, err = os.ReadFile(keyFile)
	}
	return certPEM, keyPEM, err
}

func storeCA(ctx context.Context, st store.Store) (certPEM, keyPEM []byte, err error) {
	if certPEM, _, err = store.GetBytes(ctx, st, pki.CACertKey, 1<<20); err == nil {
		keyPEM, _, err = store.GetBytes(ctx, st, pki.CAKeyKey, 1<<20)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("join: the CA in %s: %w", st, err)
	}
	return certPEM, keyPEM, nil
}

// firstMissing is the outermost directory of dir that does not exist yet
// ("" when dir exists).
func firstMissing(dir string) string {
	missing := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return missing
		}
		missing = d
	}
}
