package adm

import (
	"crypto/tls"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/status"
)

// versionReport is the versions part of etcdadm status.
type versionReport struct {
	ClusterVersion string          `json:"clusterVersion,omitempty"`
	Downgrade      string          `json:"downgrade,omitempty"`
	Rollout        *rollout.Record `json:"rollout,omitempty"`
	// Done and Next: members at the rollout's target, and those still to
	// switch in the step in flight (in their order).
	Done    []string `json:"done,omitempty"`
	Pending []string `json:"pending,omitempty"`
	// Restore is the latest cluster restore (etcdadm restore).
	Restore *recovery.Record `json:"restore,omitempty"`
	// Paused: 'etcdadm pause' holds the automation.
	Paused *pause.Pause `json:"paused,omitempty"`
	// CARotation: the latest CA rotation (etcdadm pki rotate-ca).
	CARotation *pki.Rotation `json:"caRotation,omitempty"`
}

// versionsOf adds what etcd says of versions to the store's records
// (read once, by status.Collect).
func versionsOf(c *cli.Context, r status.Report) versionReport {
	vr := versionReport{Rollout: r.Rollout, Restore: r.Restore, Paused: r.Paused, CARotation: r.CARotation}
	for _, m := range r.Members {
		if m.Downgrade != "" {
			vr.Downgrade = "enabled " + m.Downgrade
		}
		if vr.ClusterVersion == "" && m.Healthy && len(m.ClientURLs) > 0 {
			vr.ClusterVersion, _ = clusterVersionOf(c, m.ClientURLs[0])
		}
	}
	rec := vr.Rollout
	if rec == nil {
		return vr
	}
	k := len(rec.Path)
	for _, m := range r.Members {
		if i := rec.Index(m.Version); i >= 0 && i < k {
			k = i
		}
	}
	for _, m := range r.Members {
		switch i := rec.Index(m.Version); {
		case i == len(rec.Path)-1:
			vr.Done = append(vr.Done, m.Name)
		case i == k:
			vr.Pending = append(vr.Pending, m.Name)
		}
	}
	return vr
}

func printVersions(w io.Writer, vr versionReport) {
	if vr.ClusterVersion != "" {
		fmt.Fprintf(w, "\ncluster version: %s", vr.ClusterVersion)
		if vr.Downgrade != "" {
			fmt.Fprintf(w, "  (downgrade %s)", vr.Downgrade)
		}
		fmt.Fprintln(w)
	}
	if vr.CARotation.Active() {
		fmt.Fprintln(w, vr.CARotation.String())
	}
	if r := vr.Restore; r != nil && r.State != recovery.Done {
		var done []string
		for n := range r.Restored {
			done = append(done, n)
		}
		slices.Sort(done)
		fmt.Fprintf(w, "RESTORE %s: backup %s, %s; restored: %s of %d members\n", r.Command, r.Backup, strings.ToUpper(string(r.State)), listOrNone(done), len(r.Members))
		if r.Reason != "" {
			fmt.Fprintf(w, "  %s\n", r.Reason)
		}
	}
	rec := vr.Rollout
	if rec == nil {
		return
	}
	state := string(rec.State)
	if rec.State == rollout.Failed {
		state = "STOPPED"
	}
	fmt.Fprintf(w, "rollout: %s: %s (since %s)\n", rollout.PathString(rec.Path), state, rec.Started.Format(time.RFC3339))
	if rec.State != rollout.Done {
		fmt.Fprintf(w, "  at target: %s; next: %s\n", listOrNone(vr.Done), listOrNone(vr.Pending))
	}
	if f := rec.Failed; f != nil {
		fmt.Fprintf(w, "  FAILED: %s at etcd %s (%s): %s\n  it runs its previous version again; fix the cause, then 'etcdadm upgrade --abort'\n", f.Member, f.Version, f.At.Format(time.RFC3339), f.Reason)
	}
	if rec.Note != "" {
		fmt.Fprintf(w, "  last: %s\n", rec.Note)
	}
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// clusterVersionOf reads etcd's /version with the status command's TLS.
func clusterVersionOf(c *cli.Context, clientURL string) (string, error) {
	ec := etcdclient.FromFlags(c)
	var tc *tls.Config
	if ec.CACert != "" {
		var err error
		if tc, err = (transport.TLSInfo{CertFile: ec.Cert, KeyFile: ec.Key, TrustedCAFile: ec.CACert}).ClientConfig(); err != nil {
			return "", err
		}
	}
	return rollout.ClusterVersion(c.Context, tc, clientURL)
}
