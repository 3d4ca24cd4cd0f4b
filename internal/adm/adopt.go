package adm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
)

func adoptCommand() *cli.Command {
	return &cli.Command{
		Name:  "adopt",
		Usage: "take over a running etcd we did not create (kubeadm, plain etcd units), keeping its data, names and CA",
		Description: `Reads the running cluster (--endpoints, with a client certificate it accepts):
its members, their etcd version and TLS. Refuses, writing nothing, when a
member does not answer, a member is a learner, members run different
versions, the version is not 3.5, 3.6 or 3.7, a member name is not a DNS
label, the store already holds a cluster, or the CA given did not sign the
client certificate.

Then, in the store: a backup of the leader's snapshot, verified (listed like
every backup); the CA (--ca-cert, --ca-key: the CA that signed the cluster's
certificates) as the cluster CA, so every existing client certificate keeps
working; the spec (member count, version) and settings (ports and TLS from the
members' URLs, DNS suffix when every peer URL is MEMBER.SUFFIX); each member
in the peer registry; and control/etcd-cluster-created. The record
etcdadm/adoption.json says how far it got: run it again after a crash.

The running etcd is not touched. Next, one master at a time: stop its old
etcd unit and reprovision it with our config ('etcdadm render') with the data
in /var/lib/etcd kept and the member's name as its host name (provider none)
or its volume's name; etcd-member-join rejoins it with its data (member
names kept, its peer URL updated if it changed). Wait for 'etcdadm status' to
show every member healthy before the next. A version upgrade then goes through
'etcdadm upgrade --to V'.

Exit codes: 0 adopted, 1 failure (run it again), 2 refused (nothing written).`,
		Flags: append([]cli.Flag{cliflags.Store(),
			&cli.StringFlag{Name: "ca-cert", Usage: "the existing CA certificate (PEM) that signed the members' and clients' certificates, e.g. /etc/kubernetes/pki/etcd/ca.crt"},
			&cli.StringFlag{Name: "ca-key", Usage: "its private key (PEM file, never on the command line), e.g. /etc/kubernetes/pki/etcd/ca.key"},
			&cli.StringFlag{Name: "cluster-name", Value: "etcd", Usage: "cluster name (our settings; the running cluster is not changed)"},
		}, etcdclient.Flags("")...),
		Action: adopt,
	}
}

func adopt(c *cli.Context) error {
	cfg := etcdclient.FromFlags(c)
	if len(cfg.Endpoints) == 0 {
		return cli.Exit("adopt: give the running cluster's client URLs with --endpoints (and its --cacert, --cert, --key)", 2)
	}
	in := recovery.AdoptInput{ClusterName: c.String("cluster-name"), Log: slog.Default(), Now: time.Now}
	var errs []error
	read := func(flag string) []byte {
		p := c.String(flag)
		if p == "" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
		return b
	}
	in.CACertPEM, in.CAKeyPEM = read("ca-cert"), read("ca-key")
	if !cfg.Insecure {
		in.ClientCertPEM = read("cert")
	}
	if (in.CACertPEM == nil) != (in.CAKeyPEM == nil) {
		errs = append(errs, errors.New("--ca-cert and --ca-key go together"))
	}
	if err := errors.Join(errs...); err != nil {
		return cli.Exit(fmt.Sprintf("adopt: %v\nNothing was written.", err), 2)
	}
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	cli0, _, err := etcdClientOf(cfg)
	if err != nil {
		return cli.Exit(fmt.Sprintf("adopt: %v\nNothing was written.", err), 2)
	}
	defer cli0.Close()
	in.Client = cli0
	rep, err := recovery.Adopt(c.Context, st, in)
	if errors.Is(err, recovery.ErrNotAdoptable) || errors.Is(err, pki.ErrOtherCA) {
		return cli.Exit(fmt.Sprintf("adopt: %v\nNothing was written.", strings.TrimPrefix(err.Error(), "adopt: ")), 2)
	}
	if err != nil {
		return fmt.Errorf("%w (the record %s says how far it got: run the same command again)", err, recovery.AdoptionKey)
	}
	w := c.App.Writer
	for _, warn := range rep.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "warning:", warn)
	}
	verb := "adopted"
	if rep.Resumed {
		verb = "adoption finished"
	}
	fmt.Fprintf(w, "%s cluster %s (etcd %s, %d members) into %s\n", verb, rep.ClusterID, rep.EtcdVersion, len(rep.Members), st)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tID\tPEER URL\tCLIENT URL")
	for _, m := range rep.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, rep.MemberIDs[m.Name], m.PeerURL, m.ClientURL)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	suffix := rep.Settings.DNSSuffix
	if suffix == "" {
		suffix = "none: members are reached by address"
	}
	caState := "already in the store"
	switch {
	case rep.Settings.TLS == "insecure":
		caState = "none (plaintext cluster)"
	case rep.CAStored:
		caState = "imported"
	}
	fmt.Fprintf(w, "backup %s (verified); CA %s; TLS %s; DNS suffix %s\n", rep.Backup, caState, rep.Settings.TLS, suffix)
	fmt.Fprintf(w, "next, one master at a time: stop its old etcd, reprovision it with our config keeping /var/lib/etcd, host name = member name; wait for 'etcdadm status' to show it healthy before the next\n")
	return nil
}
