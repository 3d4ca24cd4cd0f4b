// Package member is etcd-member-join: every time a host starts it decides,
// from what it sees in the store, on disk and in etcd (never from what it
// remembers), what the local etcd member must do:
//
//	found    no cluster yet: register, agree on one initial member plan
//	         (a create-only write), start with state "new"
//	join     the cluster has room: add as learner, start, promote
//	rejoin   the data directory holds this member's data: start
//	replace  the member exists but its data is gone: back up, remove, join
//	standby  the cluster is full: leave membership alone, re-check later
//	paused   'etcdadm pause' holds the automation: no membership change
//
// Membership changes are serialized by a lock in etcd, one learner at a
// time, never a removal that loses quorum. Reconcile shrinks a cluster to
// the spec. Imported by cmd/etcd-member-join and the etcdadm CLI.
package member

import "errors"

// Action is what a run did.
type Action string

// Actions.
const (
	Found   Action = "found"
	Join    Action = "join"
	Rejoin  Action = "rejoin"
	Replace Action = "replace"
	Standby Action = "standby"
	// Paused: the operator holds the automation ('etcdadm pause'):
	// nothing changed, etcd at most restarted on this host's own data.
	Paused Action = "paused"
)

// Store keys of ours.
const (
	peersPrefix = "etcdadm/peers/"
	planKey     = PlanKey
	lockKey     = "/etcdadm/locks/membership"
)

// PlanKey holds the founders' initial membership.
const PlanKey = "etcdadm/initial-cluster.json"

// Errors.
var (
	ErrWaiting = errors.New("waiting for other members")
	ErrUnsafe  = errors.New("refused: the change could lose quorum")
	// ErrControlLost: the store lost its cluster spec while hosts still
	// hold a cluster (etcd-manager's #299 founded an empty one over it).
	ErrControlLost = errors.New("the store's control files are gone but a cluster still exists")
)
