package member

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// The timers of member join and reconcile ask first what this host's own
// member can answer, from what member join left on the host (etcd.env and
// the certificates): no store read. Only when that is not enough do they
// read the spec, the settings, the CA and the peer registry.

// localMembers lists the members through this host's own member, at the
// client URLs etcd.env advertises, with the certificates member join
// wrote; it also returns etcd.env.
func localMembers(ctx context.Context, cfg Config) ([]*etcdserverpb.Member, map[string]string, error) {
	cfg.defaults()
	vars, err := envfile.Read(cfg.EnvFile)
	if err != nil {
		return nil, nil, err
	}
	eps := strings.Split(vars["ETCD_ADVERTISE_CLIENT_URLS"], ",")
	ec := etcdclient.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Insecure: strings.HasPrefix(eps[0], "http://")}
	if !ec.Insecure {
		ec.CACert, ec.Cert, ec.Key = filepath.Join(cfg.PKIDir, "ca.crt"), filepath.Join(cfg.PKIDir, "client.crt"), filepath.Join(cfg.PKIDir, "client.key")
	}
	cli, err := etcdclient.New(ec)
	if err != nil {
		return nil, nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("member list: %w", err)
	}
	return ml.Members, vars, nil
}

// Settled reports whether this host's member is a started voting member
// of a cluster that answers (a linearizable member list through this
// host's own member) at the peer URL etcd.env advertises, and returns its registry entry as etcd.env names
// it. Member join's timer then has nothing to do.
func Settled(ctx context.Context, cfg Config) (Peer, bool) {
	members, vars, err := localMembers(ctx, cfg)
	if err != nil {
		return Peer{}, false
	}
	for _, m := range members {
		if m.Name == cfg.Name && !m.IsLearner && slices.Contains(m.PeerURLs, vars["ETCD_INITIAL_ADVERTISE_PEER_URLS"]) {
			return Peer{Name: cfg.Name, PeerURL: vars["ETCD_INITIAL_ADVERTISE_PEER_URLS"], ClientURL: vars["ETCD_ADVERTISE_CLIENT_URLS"]}, true
		}
	}
	return Peer{}, false
}

// NothingToShrink reports whether reconcile has nothing to do: the
// cluster, as this host's member answers, has no more voting members than
// the spec (its only store read) wants.
func NothingToShrink(ctx context.Context, cfg Config, st store.Store) (string, bool) {
	spec, err := clusterspec.LoadSpec(ctx, st)
	if err != nil {
		return "", false
	}
	members, _, err := localMembers(ctx, cfg)
	if err != nil {
		return "", false
	}
	voters := 0
	for _, m := range members {
		if !m.IsLearner {
			voters++
		}
	}
	if voters > int(spec.MemberCount) {
		return "", false
	}
	return fmt.Sprintf("%d voting members, the spec wants %d", voters, spec.MemberCount), true
}
