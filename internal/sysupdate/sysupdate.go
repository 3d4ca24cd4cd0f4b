// Package sysupdate keeps a sysext host's images current (etcdadm
// sysupdate, run by etcd-sysupdate.timer): systemd-sysupdate fetches a
// newer image of each of our components, systemd-sysext merges it, the
// host's registry entry lists the etcd versions it now has, and once every
// host has a newer patch of the cluster's etcd minor, the patch is declared
// as 'etcdadm upgrade --to' would: the version switchers then restart the
// members one at a time. Unattended updates never cross a minor: each
// etcd image's transfer matches the patches of its own minor only.
package sysupdate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pause"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/sysext"
)

// Config of one run.
type Config struct {
	// Root prefixes the host paths (tests); "" is /.
	Root string
	// Sysupdate is the systemd-sysupdate program.
	Sysupdate string
	// Member is this host's member name: its registry entry is refreshed
	// with the versions it has.
	Member string
	// Declare lets a run declare a newer patch every host has.
	Declare bool
	// StateDir (under Root) keeps what the host merged last.
	StateDir string
}

// Systemd is what a run asks of the host's systemd.
type Systemd interface {
	// Refresh merges the images again (systemd-sysext, in the host's
	// mount namespace) and reloads the unit files.
	Refresh(ctx context.Context) error
	// StartSwitcher starts this host's etcd-version-switcher, not waiting.
	StartSwitcher(ctx context.Context) error
}

// Deps are the outside world.
type Deps struct {
	Store   store.Store
	Systemd Systemd
	Log     *slog.Logger
	Now     func() time.Time
}

// Outcome is what a run did.
type Outcome struct {
	// Updated lists the components whose image changed: "etcd-3.6:
	// etcd-v3.6.15-x86-64.raw → etcd-v3.6.16-x86-64.raw".
	Updated []string
	// Declared is the patch this run declared, "" for none.
	Declared string
	// Summary is one line for the unit's status.
	Summary string
}

// Run updates every component of ours that has a transfer directory.
func Run(ctx context.Context, cfg Config, d Deps) (Outcome, error) {
	var out Outcome
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	entries, err := os.ReadDir(filepath.Join(root, "etc"))
	if err != nil {
		return out, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	comps := sysext.Components(names)
	if len(comps) == 0 {
		return out, fmt.Errorf("sysupdate: no /etc/sysupdate.NAME.d of etcdadm's images (etcd-X.Y, etcdadm): this host was not rendered with --binaries sysext and downloaded images")
	}
	// What the host merged: written before the first update, and after
	// each merge, so a run that stopped between an update and its merge
	// merges on the next.
	mergedFile := filepath.Join(root, cfg.StateDir, "merged")
	merged, err := os.ReadFile(mergedFile)
	if errors.Is(err, fs.ErrNotExist) {
		// Nothing has updated the links since the boot merged them.
		merged = []byte(activeLinks(root, comps))
		if err = os.MkdirAll(filepath.Dir(mergedFile), 0o755); err == nil {
			err = atomicfile.Write(mergedFile, merged, 0o644, -1, -1)
		}
	}
	if err != nil {
		return out, fmt.Errorf("sysupdate: %w", err)
	}
	for _, c := range comps {
		link := filepath.Join(root, sysext.ActiveDir, c+".raw")
		before, _ := os.Readlink(link)
		cmd := exec.CommandContext(ctx, cfg.Sysupdate, "--component="+c, "update")
		// Its progress notifications are not this unit's status.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "NOTIFY_SOCKET=") })
		b, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("sysupdate: %s --component=%s update: %w\n%s", cfg.Sysupdate, c, err, strings.TrimSpace(string(b)))
		}
		after, _ := os.Readlink(link)
		if after != before {
			out.Updated = append(out.Updated, c+": "+filepath.Base(before)+" → "+filepath.Base(after))
			d.Log.Info("image updated", "component", c, "from", filepath.Base(before), "to", filepath.Base(after))
		}
	}
	if now := activeLinks(root, comps); now != string(merged) {
		if len(out.Updated) == 0 {
			d.Log.Info("merging the images an earlier run fetched but did not merge")
		}
		if err := d.Systemd.Refresh(ctx); err != nil {
			return out, err
		}
		if err := atomicfile.Write(mergedFile, []byte(now), 0o644, -1, -1); err != nil {
			return out, fmt.Errorf("sysupdate: %w", err)
		}
	}
	if err := restamp(ctx, cfg, d); err != nil {
		return out, err
	}
	if cfg.Declare {
		v, note, err := declarePatch(ctx, d)
		if err != nil {
			return out, err
		}
		out.Declared = v
		if note != "" {
			d.Log.Info(note)
		}
		if v != "" {
			if err := d.Systemd.StartSwitcher(ctx); err != nil {
				return out, err
			}
		}
	}
	out.Summary = summary(out)
	return out, nil
}

// activeLinks is where each component's /etc/extensions link points, one
// "component target" line each.
func activeLinks(root string, comps []string) string {
	var b strings.Builder
	for _, c := range comps {
		target, _ := os.Readlink(filepath.Join(root, sysext.ActiveDir, c+".raw"))
		fmt.Fprintf(&b, "%s %s\n", c, target)
	}
	return b.String()
}

func summary(o Outcome) string {
	s := "images current"
	if len(o.Updated) > 0 {
		s = "updated " + strings.Join(o.Updated, ", ")
	}
	if o.Declared != "" {
		s += "; declared etcd " + o.Declared + ": the switchers restart the members one at a time"
	}
	return s
}

// restamp rewrites this host's registry entry with the etcd versions it
// has now (the planner offers only versions every host can run).
func restamp(ctx context.Context, cfg Config, d Deps) error {
	peers, err := member.Peers(ctx, d.Store)
	if err != nil {
		return err
	}
	for _, p := range peers {
		if p.Name == cfg.Member {
			p.Versions = nil
			p = member.Stamp(p, cfg.Root, d.Now())
			d.Log.Info("registered this host's etcd versions", "member", p.Name, "versions", p.Versions)
			return member.Register(ctx, d.Store, p)
		}
	}
	d.Log.Info("this host has no registry entry yet (member join writes it): nothing to refresh", "member", cfg.Member)
	return nil
}

// declarePatch declares the newest patch of the spec's minor that every
// host has, when it is newer than the spec's and nothing holds the
// automation. It returns the version declared ("" for none) and, when it
// declared nothing for a reason worth a log line, that reason.
func declarePatch(ctx context.Context, d Deps) (string, string, error) {
	if p, err := pause.Get(ctx, d.Store); err != nil || p != nil {
		if p != nil {
			return "", "no patch declared: " + p.String(), nil
		}
		return "", "", err
	}
	cl, err := clusterspec.Load(ctx, d.Store)
	if err != nil {
		return "", "", err
	}
	cur, err := etcdversion.Parse(cl.Spec.EtcdVersion)
	if err != nil {
		return "", "", err
	}
	avail, err := rollout.Available(ctx, d.Store)
	if err != nil {
		return "", "", err
	}
	to := cur
	for _, v := range avail {
		if etcdversion.SameMinor(v, cur) && etcdversion.Compare(v, to) > 0 {
			to = v
		}
	}
	if to == cur {
		return "", "", nil
	}
	dec, err := rollout.Declare(ctx, d.Store, to, false, d.Now())
	switch {
	case errors.Is(err, rollout.ErrRunning):
		return "", fmt.Sprintf("etcd %s is on every host; not declared yet: %v", to, err), nil
	case err != nil:
		return "", "", fmt.Errorf("sysupdate: declare etcd %s: %w", to, err)
	case dec.Unchanged:
		return "", "", nil
	}
	d.Log.Info("declared a patch every host has", "from", cur.String(), "to", to.String(), "plan", dec.Plan.Path())
	return to.String(), "", nil
}
