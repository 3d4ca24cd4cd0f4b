// Package manual is the base layer an operator runs by hand on a master,
// the etcdadm proposal's init / join / reset: Init founds a one-member
// cluster, Join adds this host to a running cluster, Reset takes it out
// again and leaves the host blank. Each runs member join (internal/member)
// as the units do, against a store: the shared one, or, by default, a file
// store of the host's own (/var/lib/etcdadm/store), so the same code runs
// with or without the automation. Imported by internal/adm only.
package manual

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcdadm/etcdadm-immutable/ignition"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// LocalStoreDir is the host's own store, under the root prefix, when no
// shared store is given: where render --manual points the units.
const LocalStoreDir = ignition.ManualStoreDir

// Errors an operator tells apart; each says what to do.
var (
	ErrInitialized = errors.New("this host already runs a member")
	ErrRefused     = errors.New("refused")
)

// InitOptions are what etcdadm init is told.
type InitOptions struct {
	// Version is the etcd version to run (a version the host has).
	Version string
	// CACert and CAKey, PEM, import an existing CA; nil creates one.
	CACert, CAKey []byte
	// ClusterName goes into the cluster token.
	ClusterName string
}

// InitResult says what Init did.
type InitResult struct {
	// Already: the host ran a member before; nothing was changed.
	Already bool
	Member  member.Peer
	Reason  string
}

// Init founds a one-member cluster on this host: the CA (created or
// imported), the declaration (one member, Version), then member join,
// which issues the member's certificates, writes etcd.env, starts etcd
// and waits until it serves. On a host whose member already runs, it
// reports that and changes nothing; after a crash, running it again
// finishes the job.
func Init(ctx context.Context, cfg member.Config, d member.Deps, o InitOptions) (InitResult, error) {
	created, err := exists(ctx, d.Store, etcdmanager.ClusterCreatedKey)
	if err != nil {
		return InitResult{}, err
	}
	if created {
		if ok, err := d.Service.Active(ctx); err == nil && ok {
			return InitResult{Already: true, Reason: "the store " + d.Store.String() + " holds a cluster and etcd runs here: nothing changed ('etcdadm status' shows it)"}, nil
		}
		return InitResult{}, fmt.Errorf("manual: %w but etcd is not running: start it with 'systemctl start etcd-member-join' (or 'etcdadm reset' to make the host blank)", ErrInitialized)
	}
	svc, release, err := localetcd.Hold(ctx, cfg.Root, "etcdadm init", d.Service)
	if err != nil {
		return InitResult{}, err
	}
	defer release()
	d.Service = svc
	if o.CACert != nil || o.CAKey != nil {
		if _, err := pki.Import(ctx, d.Store, o.CACert, o.CAKey); err != nil {
			return InitResult{}, err
		}
	} else if _, err := pki.Init(ctx, d.Store, pki.InitOptions{}); err != nil {
		return InitResult{}, err
	}
	c := clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 1, EtcdVersion: o.Version}, Settings: clusterspec.Settings{ClusterName: o.ClusterName}}
	if err := clusterspec.Seed(ctx, d.Store, c, false); err != nil {
		return InitResult{}, err
	}
	res, err := member.Run(ctx, cfg, d)
	if err != nil {
		return InitResult{}, err
	}
	return InitResult{Member: res.Member, Reason: string(res.Action) + ": " + res.Reason}, nil
}

func exists(ctx context.Context, st store.Store, key string) (bool, error) {
	_, err := st.Stat(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("manual: %s in %s: %w", key, st, err)
	}
	return true, nil
}

// asideSuffix names what a reset moves aside.
func asideSuffix(now time.Time) string { return ".reset-" + now.UTC().Format("20060102T150405Z") }

// moveAside renames path to path+suffix when it exists; it returns the
// new path ("" when there was nothing).
func moveAside(path, suffix string) (string, error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	dst := path + suffix
	if err := os.Rename(path, dst); err != nil {
		return "", fmt.Errorf("manual: move %s aside: %w", path, err)
	}
	return dst, nil
}
