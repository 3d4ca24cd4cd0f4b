package adm

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/units"
)

func rotateCACommand() *cli.Command {
	return &cli.Command{
		Name:  "rotate-ca",
		Usage: "replace the cluster CA without an outage (start, show, --finish)",
		Description: `Replaces the cluster CA in phases; the version switcher on each host does the
member's part, one member at a time (quorum kept, the leader last), like a
version rollout. Run it again to see how far it is; 'etcdadm status' shows it.

  etcdadm pki rotate-ca            creates a new CA and adds it to the trust
                                   bundle; members restart one at a time to
                                   trust it; then the new CA signs.
  (you)                            reissue every client of etcd while both CAs
                                   are trusted: 'etcdadm pki issue-client NAME
                                   --out-dir DIR' writes a certificate of the
                                   new CA and the two-CA bundle; restart the
                                   client (kube-apiserver) to load them.
  etcdadm pki rotate-ca --finish   members reissue their own certificates from
                                   the new CA, then restart one at a time
                                   without the old CA.

Client certificates of the old CA work until --finish, and a client that
knows only the old CA verifies the members until --finish too: reissue every
client before it. Refused, changing nothing: no CA in the store, a rotation
already running (start), the members not yet trusting the new CA (--finish),
a version rollout in progress. Exit codes: 0 done or shown, 1 failure,
2 refused or not confirmed.`,
		Flags: []cli.Flag{
			cliflags.Store(),
			&cli.BoolFlag{Name: "finish", Usage: "drop the old CA: after every client was reissued"},
			&cli.StringFlag{Name: "algorithm", Value: "ecdsa", Usage: "key algorithm of the new CA: ecdsa (P-256) or rsa"},
			&cli.IntFlag{Name: "rsa-bits", Usage: "RSA key size with --algorithm rsa: 2048 (default) or 3072"},
			&cli.DurationFlag{Name: "ca-validity", Value: pki.DefaultCAValidity, Usage: "how long the new CA certificate is valid"},
			&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation (scripts)"},
		},
		Action: rotateCA,
	}
}

func rotateCA(c *cli.Context) error {
	st, err := cliflags.OpenStore(c)
	if err != nil {
		return err
	}
	w := c.App.Writer
	rec, _, err := pki.LoadRotation(c.Context, st)
	if err != nil {
		return err
	}
	if c.Bool("finish") {
		if rec != nil && rec.Phase == pki.PhaseTrusted {
			fmt.Fprintf(w, "Members reissue their certificates from %s, then stop trusting %s: client certificates of the old CA stop working, and clients that know only the old CA cannot verify the members.\n", rec.NewCA, rec.OldCA)
			if err := confirm(c, "finish"); err != nil {
				return err
			}
		}
		r, err := pki.FinishRotation(c.Context, st, time.Now())
		if errors.Is(err, pki.ErrRotationNotReady) {
			return cli.Exit(fmt.Sprintf("rotate-ca: %v\nNothing was changed.", err), 2)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n%s\n", r.String(), switchersAct())
		return nil
	}
	if rec.Active() {
		fmt.Fprintln(w, rec.String())
		return nil
	}
	opts := pki.InitOptions{Algorithm: c.String("algorithm"), RSABits: c.Int("rsa-bits"), Validity: c.Duration("ca-validity")}
	if err := opts.Validate(); err != nil {
		return cli.Exit(fmt.Sprintf("rotate-ca: %v\nNothing was changed.", err), 2)
	}
	ca, err := pki.LoadCA(c.Context, st)
	if err != nil {
		return cli.Exit(fmt.Sprintf("rotate-ca: %v\nNothing was changed.", err), 2)
	}
	if ro, _, err := rollout.Load(c.Context, st); err != nil {
		return err
	} else if ro != nil && ro.Active() {
		return cli.Exit(fmt.Sprintf("rotate-ca: a version rollout to %s is %s: let it finish or abort it ('etcdadm upgrade --abort') first.\nNothing was changed.", ro.Target, ro.State), 2)
	}
	fmt.Fprintf(w, "A new CA replaces %s. Members restart one at a time to trust it; nothing stops working until 'etcdadm pki rotate-ca --finish'.\n", ca.Cert.Subject.CommonName)
	if err := confirm(c, "rotate"); err != nil {
		return err
	}
	r, err := pki.StartRotation(c.Context, st, opts, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n%s.\nWhen 'etcdadm pki rotate-ca' says every member trusts the new CA, reissue every client ('etcdadm pki issue-client NAME --out-dir DIR') and restart it, then run 'etcdadm pki rotate-ca --finish'; until then old client certificates keep working.\n", r.String(), switchersAct())
	return nil
}

// switchersAct says when the switchers take a request up: their timer's
// interval, read from the unit.
func switchersAct() string {
	when := "at their timer's next run"
	if d, err := units.Interval("etcd-version-switcher.timer"); err == nil {
		when = "within " + d.String()
		if d%time.Minute == 0 {
			when = fmt.Sprintf("within %d minutes", int(d.Minutes()))
		}
	}
	return "the members' etcd-version-switcher units act " + when + " ('systemctl start etcd-version-switcher' on each master to act now)"
}
