// Package volume gives a host exactly one member identity and that
// member's data volume (design.md, "Identity, volumes and names"): a
// provider picks the volume (local: a fixed device and name; pool: a
// named volume claimed through a lease in the store), a Driver attaches
// its block device, and the device is formatted only when blank,
// checked, mounted at <root>/var/lib/etcd through a Mounter, grown, and
// recorded in <root>/run/etcdadm/identity.env for the units that follow.
// A pool claim is held in the store and, once etcd runs, in etcd too
// (confirm.go): the renewal keeps the member through a store outage of
// any length, fences the host only when neither confirms the claim, and
// un-fences it when the store does again.
//
// Only cmd/etcd-volume-attach imports it; other commands read
// identity.env.
package volume
