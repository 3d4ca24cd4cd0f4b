package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/crashpoint"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Peer is one host's entry in the store's peer registry: where the member
// it runs can be reached. Registered by member join, read by founders and
// joiners (and by the DNS registrar).
type Peer struct {
	Name      string    `json:"name"`
	PeerURL   string    `json:"peerURL"`
	ClientURL string    `json:"clientURL"`
	Updated   time.Time `json:"updated"`
	// Versions are the etcd versions this host has in /opt/etcd (baked,
	// or fetched from a release).
	Versions []string `json:"versions,omitempty"`
}

// Register writes a host's entry in the peer registry (member join; an
// adoption registers the members it found).
func Register(ctx context.Context, st store.Store, p Peer) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, peersPrefix+p.Name+".json", b, store.PutOptions{}); err != nil {
		return fmt.Errorf("register %s: %w", p.Name, err)
	}
	return nil
}

// Peers lists the registry, sorted by name.
func Peers(ctx context.Context, st store.Store) ([]Peer, error) {
	var out []Peer
	err := store.EachJSON(ctx, st, peersPrefix, 1<<16, func(name string, b []byte) error {
		var p Peer
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("%s.json: %w", name, err)
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("peer registry: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Plan is the initial membership every founder starts with.
type Plan struct {
	Members []Peer    `json:"members"`
	Token   string    `json:"token"`
	Created time.Time `json:"created"`
}

// InitialCluster renders etcd's --initial-cluster.
func (p Plan) InitialCluster() string {
	var parts []string
	for _, m := range p.Members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

func (p Plan) has(name string) bool {
	for _, m := range p.Members {
		if m.Name == name {
			return true
		}
	}
	return false
}

func loadPlan(ctx context.Context, st store.Store) (*Plan, error) {
	b, _, err := store.GetBytes(ctx, st, planKey, 1<<20)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("initial plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("initial plan %s: %w", planKey, err)
	}
	return &p, nil
}

// fixPlan writes a plan create-only; if another founder won, theirs is
// returned. Either way every founder ends up with the same plan.
func fixPlan(ctx context.Context, st store.Store, p Plan) (*Plan, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	_, err = store.PutBytes(ctx, st, planKey, b, store.PutOptions{IfNoneMatch: true})
	if err != nil && !errors.Is(err, store.ErrPrecondition) {
		return nil, fmt.Errorf("initial plan: %w", err)
	}
	crashpoint.Here(crashpoint.FoundPlan)
	return loadPlan(ctx, st)
}
