package member

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
)

// SettingsFile holds the operator's own ETCD_* settings (tuning such as
// ETCD_QUOTA_BACKEND_BYTES), merged into etcd.env; ours win on a clash.
const SettingsFile = "etc/etcdadm/etcd-settings.env"

// versionedEnv adds the operator's settings and rewrites them for the
// version /opt/etcd/current points at (a setting that version removed is
// translated or dropped, and the journal says which).
func (j *joiner) versionedEnv(vars map[string]string) (map[string]string, error) {
	extra, err := envfile.Read(filepath.Join(j.cfg.Root, SettingsFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("member join: %w", err)
	}
	out := map[string]string{}
	for k, v := range extra {
		if strings.HasPrefix(k, "ETCD_") {
			out[k] = v
		}
	}
	for k, v := range vars {
		out[k] = v
	}
	cur, err := etcdbin.HostDir(j.cfg.Root).Current()
	if err != nil {
		return out, nil // no /opt/etcd/current (tests running a fixed binary)
	}
	out, notes := etcdversion.Env(cur, out)
	for _, n := range notes {
		j.log.Warn("etcd setting rewritten for etcd "+cur.String(), "change", n)
	}
	return out, nil
}

// RewriteEnv rewrites etcd.env for version v (the version switcher, before
// it restarts etcd on another binary), with set applied on top (an empty
// value removes the setting). changed reports a new content.
func RewriteEnv(cfg Config, v etcdversion.Version, set map[string]string) (changed bool, notes []string, err error) {
	cfg.defaults()
	vars, err := envfile.Read(cfg.EnvFile)
	if err != nil {
		return false, nil, err
	}
	for k, val := range set {
		if val == "" {
			delete(vars, k)
		} else {
			vars[k] = val
		}
	}
	vars, notes = etcdversion.Env(v, vars)
	changed, err = localetcd.WriteEnv(cfg.EnvFile, vars, cfg.Owner)
	return changed, notes, err
}

// useClusterVersion points /opt/etcd/current at the version a member
// without data must start with: the lowest version the running members
// have (a binary older than the cluster version is refused by etcd, and a
// skipped minor corrupts), or the spec's before the cluster exists. A
// member with data keeps the binary that wrote it (the version switcher
// moves it), unless that binary is older than every running member's: the
// data came on a volume from a host that ran a newer version (a pool
// volume outlives its host, and the new host's image has the version it
// was built with).
func (j *joiner) useClusterVersion(ctx context.Context) error {
	dir := etcdbin.HostDir(j.cfg.Root)
	cur, err := dir.Current()
	if err != nil {
		return nil // no /opt/etcd/current here (a fixed binary)
	}
	data := j.hasData()
	want, err := etcdversion.Parse(j.cluster.Spec.EtcdVersion)
	if err != nil {
		return fmt.Errorf("member join: %w", err)
	}
	if data && etcdversion.Compare(cur, want) >= 0 {
		// As new as the spec: no running member is newer, and asking
		// them on every run would cost each host's timer a status call
		// to every member.
		return nil
	}
	running := false
	if created, err := exists(ctx, j.d.Store, etcdmanager.ClusterCreatedKey); err != nil {
		return err
	} else if created {
		var v etcdversion.Version
		if v, running = j.lowestRunningVersion(ctx); running {
			want = v
		}
	}
	if want == cur || data && (!running || etcdversion.Compare(want, cur) < 0) {
		return nil
	}
	if err := dir.Ensure(ctx, want, etcdbin.Releases{Store: j.d.Store}); err != nil {
		return fmt.Errorf("member join: this member must start with etcd %s (the version the cluster runs): %w", want, err)
	}
	if err := localetcd.Use(dir, want); err != nil {
		return fmt.Errorf("member join: %w", err)
	}
	j.log.Info("using the etcd version the cluster runs", "from", cur.String(), "to", want.String(), "data", data)
	return nil
}

// lowestRunningVersion asks every registered member for its version.
func (j *joiner) lowestRunningVersion(ctx context.Context) (etcdversion.Version, bool) {
	eps, err := j.clusterEndpoints(ctx)
	if err != nil {
		return etcdversion.Version{}, false
	}
	cli, err := j.client(eps)
	if err != nil {
		return etcdversion.Version{}, false
	}
	defer cli.Close()
	var vs []etcdversion.Version
	for _, ep := range eps {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if v, err := etcdversion.Parse(st.Version); err == nil {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return etcdversion.Version{}, false
	}
	return slices.MinFunc(vs, etcdversion.Compare), true
}
