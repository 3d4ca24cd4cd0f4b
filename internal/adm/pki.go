package adm

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

func pkiCommand() *cli.Command {
	dirFlag := func(value, usage string) cli.Flag {
		return &cli.StringFlag{Name: "dir", Value: value, EnvVars: []string{"ETCDADM_PKI_DIR"}, Usage: usage}
	}
	ownerFlag := &cli.StringFlag{
		Name: "owner", EnvVars: []string{"ETCDADM_PKI_OWNER"},
		Usage: "USER[:GROUP] (names or numbers) to own the files written, e.g. etcd; default: a replaced file keeps its owner, a new one is the caller's",
	}
	return &cli.Command{
		Name:  "pki",
		Usage: "the cluster's certificates: the CA in the store, client certificates, renewal",
		Description: `etcd runs with mutual TLS. The cluster CA lives in the store:
` + pki.CAKeyKey + ` (its private key) and ` + pki.CACertKey + ` (its certificate, or a bundle of
several CAs during a rollover: peers are trusted when any of them signed, new
certificates are signed by the one that belongs to ca.key). Anyone who can read
the store can issue certificates for the cluster: restrict access to it as you
would to a CA key.

Each member issues its own certificates when it joins (etcd-member-join), into
/etc/etcd/pki: ca.crt, peer.{crt,key}, server.{crt,key}, client.{crt,key}.
The renewal timer runs 'etcdadm pki renew', which replaces certificates with a
third of their lifetime or less left; etcd picks the new ones up without a
restart.`,
		Subcommands: []*cli.Command{
			{
				Name:  "init",
				Usage: "create the cluster CA in the store (does nothing if one exists)",
				Description: `Creates a CA key and a self-signed CA certificate and stores them, create-only,
as ` + pki.CAKeyKey + ` and then ` + pki.CACertKey + `. If the store already holds a
CA, init says so and changes nothing. If an earlier init was interrupted after
storing the key, running init again finishes the CA with that key. Hosts
racing to init end up sharing one CA.

To adopt an existing etcd CA (kubeadm, etcd-manager) instead, copy its
certificate and key (PEM) to those two keys and skip init.`,
				Flags: []cli.Flag{
					cliflags.Store(),
					&cli.StringFlag{Name: "algorithm", Value: "ecdsa", Usage: "key algorithm of the CA and every certificate it signs: ecdsa (P-256) or rsa"},
					&cli.IntFlag{Name: "rsa-bits", Usage: "RSA key size with --algorithm rsa: 2048 (default) or 3072"},
					&cli.DurationFlag{Name: "ca-validity", Value: pki.DefaultCAValidity, Usage: "how long the CA certificate is valid; certificates it signs never outlive it"},
				},
				Action: pkiInit,
			},
			{
				Name:      "issue-client",
				Usage:     "write a client certificate for a consumer of etcd (kube-apiserver, your etcdctl)",
				ArgsUsage: "NAME",
				Description: `Signs a client certificate with common name NAME (etcd's user name when etcd
auth is on) and a new key, and writes NAME.crt, NAME.key (mode 0600) and ca.crt
(the CA bundle, to verify the etcd servers) into --out-dir. The key goes only
to that file, never to the output. If NAME.crt there is still valid with more
than a third of its lifetime left, it is kept. Renew these files with
'etcdadm pki renew --dir DIR'.

For kube-apiserver, e.g.:
  etcdadm pki issue-client kube-apiserver-etcd-client --out-dir /etc/kubernetes/pki/etcd
  --etcd-cafile=.../ca.crt --etcd-certfile=.../kube-apiserver-etcd-client.crt
  --etcd-keyfile=.../kube-apiserver-etcd-client.key`,
				Flags: []cli.Flag{
					cliflags.Store(),
					&cli.StringFlag{Name: "out-dir", Required: true, Usage: "directory to write NAME.crt, NAME.key and ca.crt into (created 0700 if missing)"},
					&cli.DurationFlag{Name: "validity", Value: pki.DefaultLeafValidity, Usage: "how long the certificate is valid"},
					ownerFlag,
					&cli.BoolFlag{Name: "kubeadm", Usage: "also print the etcd.external section of a kubeadm ClusterConfiguration for these files and the cluster's members"},
				},
				Action: pkiIssueClient,
			},
			{
				Name:  "renew",
				Usage: "renew the certificates in a directory that are due (what the renewal timer runs)",
				Description: `For every NAME.crt in --dir with NAME.key beside it that the cluster CA signed:
when a third of its lifetime or less is left, issues it again with the same
subject, names, usages and validity and a new key, and replaces both files
atomically. Also brings ca.crt up to date with the bundle in the store.
Certificates of other CAs are left alone. Prints what it renewed; exits 0 when
nothing is due. etcd loads its certificate files on each new connection, so
renewed certificates need no restart; a changed ca.crt does (see the output).`,
				Flags: []cli.Flag{cliflags.Store(), dirFlag("/etc/etcd/pki", "the directory to renew certificates in"), ownerFlag,
					&cli.StringFlag{Name: "metrics-file", EnvVars: []string{"ETCDADM_PKI_METRICS_FILE"}, Usage: "write each certificate's expiry and the run's outcome here as Prometheus metrics, for node_exporter's textfile collector (e.g. /var/lib/node_exporter/textfile/etcd_pki.prom)"}},
				Action: pkiRenew,
			},
			{
				Name:  "show",
				Usage: "show the CA in the store and, with --dir, the certificates in a directory",
				Description: `Shows each CA of the store's bundle (subject, key, expiry, which one signs)
and the latest CA rotation ('etcdadm pki rotate-ca').
With --dir also each certificate there: subject, names (SANs), expiry, the
share of its lifetime left, and whether it is due for renewal or was signed by
a CA the store does not know.`,
				Flags:  []cli.Flag{cliflags.Store(), dirFlag("", "also show the certificates in this directory, e.g. /etc/etcd/pki"), outputFlag()},
				Action: pkiShow,
			},
			rotateCACommand(),
		},
	}
}

func pkiInit(c *cli.Context) error {
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	opts := pki.InitOptions{Algorithm: c.String("algorithm"), RSABits: c.Int("rsa-bits"), Validity: c.Duration("ca-validity")}
	if err := opts.Validate(); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	created, err := pki.Init(c.Context, st, opts)
	if err != nil {
		return err
	}
	ca, err := pki.LoadCA(c.Context, st)
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("%q, %s, valid until %s", ca.Cert.Subject.CommonName, ca.KeyAlgorithm(), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	w := c.App.Writer
	if !created {
		fmt.Fprintf(w, "the store %s already holds the cluster CA (%s); nothing changed\n", st, desc)
		if c.IsSet("algorithm") || c.IsSet("rsa-bits") || c.IsSet("ca-validity") {
			fmt.Fprintln(w, "the options given apply only to a new CA and were not used")
		}
		return nil
	}
	fmt.Fprintf(w, "created the cluster CA in %s: %s\n", st, desc)
	fmt.Fprintf(w, "its key is %s: whoever can read the store can issue certificates for this cluster\n", pki.CAKeyKey)
	return nil
}

func pkiIssueClient(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("usage: etcdadm pki issue-client NAME --out-dir DIR [--validity 8760h]", 2)
	}
	name, dir := c.Args().First(), c.String("out-dir")
	owner, err := pki.ParseOwner(c.String("owner"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	ca, err := pki.LoadCA(c.Context, st)
	if err != nil {
		return err
	}
	issued, err := ca.IssueClientFiles(c.Context, dir, name, c.Duration("validity"), owner)
	if err != nil {
		return err
	}
	crt := filepath.Join(dir, name+".crt")
	infos, err := pki.Inspect(dir, time.Now())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(infos, func(ci pki.CertInfo) bool { return ci.File == name+".crt" })
	if i < 0 {
		return fmt.Errorf("pki: %s missing after writing it", crt)
	}
	until := infos[i].NotAfter.UTC().Format(time.RFC3339)
	if issued {
		fmt.Fprintf(c.App.Writer, "wrote %s (CN %s, valid until %s), %s (0600) and %s\n", crt, name, until, filepath.Join(dir, name+".key"), filepath.Join(dir, pki.CAFile))
	} else {
		fmt.Fprintf(c.App.Writer, "kept %s: valid until %s, renewal due after %s ('etcdadm pki renew --dir %s')\n", crt, until, infos[i].RenewAfter.UTC().Format(time.RFC3339), dir)
	}
	if !c.Bool("kubeadm") {
		return nil
	}
	peers, err := member.Peers(c.Context, st)
	if err != nil {
		return err
	}
	if len(peers) == 0 {
		return cli.Exit("pki issue-client --kubeadm: no member in the store's peer registry yet: run it once the cluster is up", 1)
	}
	fmt.Fprintln(c.App.Writer, "\n# kubeadm ClusterConfiguration (kubeadm.k8s.io/v1beta4), external etcd:\netcd:\n  external:\n    endpoints:")
	for _, p := range peers {
		fmt.Fprintf(c.App.Writer, "    - %s\n", p.ClientURL)
	}
	fmt.Fprintf(c.App.Writer, "    caFile: %s\n    certFile: %s\n    keyFile: %s\n", filepath.Join(dir, pki.CAFile), crt, filepath.Join(dir, name+".key"))
	return nil
}

func pkiRenew(c *cli.Context) error {
	dir := c.String("dir")
	owner, err := pki.ParseOwner(c.String("owner"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	renewed, err := pki.RenewDir(c.Context, st, dir, owner, time.Now())
	if mf := c.String("metrics-file"); mf != "" {
		if merr := pki.WriteMetrics(mf, dir, err, time.Now()); merr != nil {
			fmt.Fprintf(c.App.ErrWriter, "warning: metrics: %v\n", merr)
		}
	}
	w := c.App.Writer
	exp, xerr := pki.Expiry(dir)
	for _, f := range renewed {
		if f == pki.CAFile {
			fmt.Fprintf(w, "updated %s from the store's CA bundle: etcd reads it only when it starts; restart etcd (systemctl restart etcd) to trust the new bundle\n", filepath.Join(dir, f))
			continue
		}
		fmt.Fprintf(w, "renewed %s, valid until %s\n", filepath.Join(dir, f), exp[f].UTC().Format(time.RFC3339))
	}
	if err != nil {
		return err
	}
	if xerr != nil {
		return xerr
	}
	if len(renewed) == 0 {
		infos, err := pki.Inspect(dir, time.Now())
		if err != nil {
			return err
		}
		next := ""
		var at time.Time
		for _, ci := range infos {
			if !ci.IsCA && (next == "" || ci.RenewAfter.Before(at)) {
				next, at = ci.File, ci.RenewAfter
			}
		}
		if next == "" {
			fmt.Fprintf(w, "nothing due in %s (no certificates to renew)\n", dir)
		} else {
			fmt.Fprintf(w, "nothing due in %s; next: %s after %s\n", dir, next, at.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

type pkiShowOut struct {
	Store string      `json:"store"`
	CA    []pkiShowCA `json:"ca"`
	// Rotation is the latest CA rotation, done or not.
	Rotation *pki.Rotation  `json:"rotation,omitempty"`
	Dir      string         `json:"dir,omitempty"`
	Certs    []pkiShowEntry `json:"certificates,omitempty"`
}

type pkiShowCA struct {
	pki.CertInfo
	Signs bool `json:"signs"`
}

type pkiShowEntry struct {
	pki.CertInfo
	// Status: ok, renewal due, expired, or unknown CA.
	Status string `json:"status"`
}

func pkiShow(c *cli.Context) error {
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	now := time.Now()
	out := pkiShowOut{Store: st.String(), Dir: c.String("dir")}
	ca, caErr := pki.LoadCA(c.Context, st)
	if caErr != nil && (out.Dir == "" || !errors.Is(caErr, pki.ErrNoCA)) {
		return caErr
	}
	if ca != nil {
		for _, cert := range ca.Bundle {
			out.CA = append(out.CA, pkiShowCA{pki.Describe(cert, now), cert == ca.Cert})
		}
	}
	if out.Rotation, _, err = pki.LoadRotation(c.Context, st); err != nil {
		return err
	}
	if out.Dir != "" {
		infos, err := pki.Inspect(out.Dir, now)
		if err != nil {
			return err
		}
		for _, ci := range infos {
			e := pkiShowEntry{CertInfo: ci, Status: "ok"}
			switch {
			case ca == nil || (!ci.IsCA && !ca.Issued(ci.Cert)) || (ci.IsCA && !slices.ContainsFunc(ca.Bundle, ci.Cert.Equal)):
				e.Status = "unknown CA"
			case !now.Before(ci.NotAfter):
				e.Status = "EXPIRED"
			case ci.Due && !ci.IsCA:
				e.Status = "renewal due"
			}
			out.Certs = append(out.Certs, e)
		}
	}
	if c.String("output") == "json" {
		return writeJSON(c.App.Writer, out)
	}
	w := c.App.Writer
	if ca == nil {
		fmt.Fprintf(w, "no CA in %s: %v\n", st, caErr)
	} else {
		fmt.Fprintf(w, "CA bundle in %s:\n", st)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SUBJECT\tKEY\tNOT AFTER\tLEFT\tSIGNS")
		for _, e := range out.CA {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Subject, e.KeyAlgorithm, e.NotAfter.UTC().Format(time.RFC3339), left(e.CertInfo, now), yesNo(e.Signs))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if out.Rotation != nil {
		fmt.Fprintf(w, "\n%s\n", out.Rotation)
	}
	if out.Dir == "" {
		return nil
	}
	fmt.Fprintf(w, "\ncertificates in %s:\n", out.Dir)
	return showCerts(w, out.Certs, now)
}

func showCerts(w io.Writer, certs []pkiShowEntry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tSUBJECT\tSANS\tNOT AFTER\tLEFT\tSTATUS")
	for _, e := range certs {
		sans := strings.Join(append(append([]string{}, e.DNSNames...), e.IPs...), ",")
		if sans == "" {
			sans = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.File, e.Subject, sans, e.NotAfter.UTC().Format(time.RFC3339), left(e.CertInfo, now), e.Status)
	}
	return tw.Flush()
}

// left is the share of the lifetime left and the time it stands for.
func left(ci pki.CertInfo, now time.Time) string {
	if !now.Before(ci.NotAfter) {
		return "0%"
	}
	return fmt.Sprintf("%.0f%% (%s)", 100*ci.Left, humanAge(ci.NotAfter.Sub(now)))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
