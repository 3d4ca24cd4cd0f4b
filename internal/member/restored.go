package member

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
)

// DataDir is where this member's data lives (defaults applied).
func DataDir(cfg Config) string { cfg.defaults(); return cfg.DataDir }

// Defaulted is cfg with every default path and bound filled in.
func (c Config) Defaulted() Config { c.defaults(); return c }

// StartRestored starts etcd on data a cluster restore put in place: the
// restored membership, the restore's new cluster token. The data
// directory and everything under it becomes the etcd user's.
func StartRestored(ctx context.Context, cfg Config, d Deps, members []Peer, token string) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	j, err := newJoiner(ctx, cfg, d)
	if err != nil {
		return err
	}
	if err := chownTree(filepath.Join(cfg.DataDir, "member"), cfg.Owner.UID, cfg.Owner.GID); err != nil {
		return fmt.Errorf("member: restored data: %w", err)
	}
	return j.startEtcd(ctx, "existing", InitialCluster(members), token)
}

// InitialCluster renders name=peerURL for every member, sorted.
func InitialCluster(members []Peer) string {
	var parts []string
	for _, m := range members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// FreshPeers are the registered hosts that registered within maxAge.
func FreshPeers(peers []Peer, now time.Time, maxAge time.Duration) []Peer {
	var out []Peer
	for _, p := range peers {
		if now.Sub(p.Updated) < maxAge {
			out = append(out, p)
		}
	}
	return out
}

func chownTree(dir string, uid, gid int) error {
	if uid < 0 {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// StartForcedAlone restarts this member as the only member of its
// cluster, keeping its data (etcd's --force-new-cluster, for that one
// start: localetcd.StartOnce), and waits until it serves a linearizable
// read: the way out of a lost majority that keeps everything this member
// had. A restart after it (a crash, Restart=) runs with the ordinary
// settings and keeps the members that joined since.
func StartForcedAlone(ctx context.Context, cfg Config, d Deps) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	j, err := newJoiner(ctx, cfg, d)
	if err != nil {
		return err
	}
	self := j.me.Name + "=" + j.me.PeerURL
	j.extraEnv = map[string]string{"ETCD_FORCE_NEW_CLUSTER": "true"}
	if err := j.startEtcd(ctx, "existing", self, j.cluster.Settings.ClusterToken); err != nil {
		return err
	}
	cli, err := j.client([]string{j.me.ClientURL})
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := j.waitLinearizable(ctx, cli); err != nil {
		return err
	}
	crashpoint.Here(crashpoint.RecoverForced)
	// etcd.service removed the one-start settings once etcd was up; a
	// host without the unit's ExecStartPost (an older one) loses them here.
	return localetcd.ClearOnce(cfg.Root)
}
