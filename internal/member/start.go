package member

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
)

// startEtcd writes etcd's environment file and starts (or restarts) etcd.
func (j *joiner) startEtcd(ctx context.Context, state, initialCluster, token string) error {
	// The binary first: nothing is written for an etcd that cannot run.
	if err := etcdbin.HostDir(j.cfg.Root).EnsureCurrent(ctx, etcdbin.Releases{Store: j.d.Store}); err != nil {
		return fmt.Errorf("member join: %w", err)
	}
	s := j.cluster.Settings
	listen := j.cfg.ListenHost
	if listen == "" {
		listen = "0.0.0.0"
	}
	scheme := "https"
	if s.TLS == "insecure" {
		scheme = "http"
	}
	pu, _ := url.Parse(j.me.PeerURL)
	cu, _ := url.Parse(j.me.ClientURL)
	vars := map[string]string{
		"ETCD_NAME":                        j.me.Name,
		"ETCD_DATA_DIR":                    j.cfg.DataDir,
		"ETCD_LISTEN_PEER_URLS":            scheme + "://" + net.JoinHostPort(listen, pu.Port()),
		"ETCD_LISTEN_CLIENT_URLS":          scheme + "://" + net.JoinHostPort(listen, cu.Port()),
		"ETCD_ADVERTISE_CLIENT_URLS":       j.me.ClientURL,
		"ETCD_INITIAL_ADVERTISE_PEER_URLS": j.me.PeerURL,
		"ETCD_INITIAL_CLUSTER":             initialCluster,
		"ETCD_INITIAL_CLUSTER_STATE":       state,
		"ETCD_INITIAL_CLUSTER_TOKEN":       token,
		"ETCD_STRICT_RECONFIG_CHECK":       "true",
	}
	if s.TLS != "insecure" {
		p := func(f string) string { return filepath.Join(j.cfg.PKIDir, f) }
		for k, v := range map[string]string{
			"ETCD_CLIENT_CERT_AUTH":      "true",
			"ETCD_TRUSTED_CA_FILE":       p("ca.crt"),
			"ETCD_CERT_FILE":             p("server.crt"),
			"ETCD_KEY_FILE":              p("server.key"),
			"ETCD_PEER_CLIENT_CERT_AUTH": "true",
			"ETCD_PEER_TRUSTED_CA_FILE":  p("ca.crt"),
			"ETCD_PEER_CERT_FILE":        p("peer.crt"),
			"ETCD_PEER_KEY_FILE":         p("peer.key"),
		} {
			vars[k] = v
		}
	}
	vars, err := j.versionedEnv(vars)
	if err != nil {
		return err
	}
	changed, err := localetcd.WriteEnv(j.cfg.EnvFile, vars, j.cfg.Owner)
	if err != nil {
		return err
	}
	crashpoint.Here(crashpoint.EnvWritten)
	if err := j.ownDataDir(); err != nil {
		return err
	}
	if len(j.extraEnv) > 0 {
		j.log.Info("starting etcd with settings for this start only", "state", state, "once", slices.Sorted(maps.Keys(j.extraEnv)))
		err = localetcd.StartOnce(ctx, j.cfg.Root, j.d.Service, j.extraEnv)
	} else if err = localetcd.ClearOnce(j.cfg.Root); err == nil {
		j.log.Info("starting etcd", "state", state, "envChanged", changed)
		err = localetcd.Start(ctx, j.d.Service, changed)
	}
	if err != nil {
		return fmt.Errorf("member join: start etcd: %w", err)
	}
	crashpoint.Here(crashpoint.EtcdStarted)
	return nil
}

// ownDataDir makes the data directory etcd's: a freshly formatted volume
// mounted there belongs to root. The directory itself is changed, and
// member/ when someone else owns it (data of an etcd we adopted, which
// kubeadm and plain units run as root).
func (j *joiner) ownDataDir() error {
	if err := os.MkdirAll(j.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("member join: data dir: %w", err)
	}
	if err := os.Chmod(j.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("member join: data dir: %w", err)
	}
	if j.cfg.Owner.UID >= 0 {
		if err := os.Chown(j.cfg.DataDir, j.cfg.Owner.UID, j.cfg.Owner.GID); err != nil {
			return fmt.Errorf("member join: data dir: %w", err)
		}
		mdir := filepath.Join(j.cfg.DataDir, "member")
		if fi, err := os.Stat(mdir); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != j.cfg.Owner.UID || int(st.Gid) != j.cfg.Owner.GID) {
				j.log.Info("taking over the data: giving it to etcd's user", "dir", mdir, "uid", j.cfg.Owner.UID)
				if err := chownTree(mdir, j.cfg.Owner.UID, j.cfg.Owner.GID); err != nil {
					return fmt.Errorf("member join: data dir: %w", err)
				}
			}
		}
	}
	return nil
}

// waitLinearizable waits until the member serves a linearizable read.
func (j *joiner) waitLinearizable(ctx context.Context, cli *clientv3.Client) error {
	if err := etcdclient.WaitLinearizable(ctx, cli, j.cfg.Timeout, j.cfg.Poll/4, nil); err != nil {
		return fmt.Errorf("member join: %w", err)
	}
	return nil
}
