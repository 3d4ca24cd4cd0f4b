// Package dns keeps every etcd member name resolvable: each host publishes
// the address of the member it runs in the store (a lease it renews), learns
// the others' and hands the live set to a Provider (a managed /etc/hosts
// block, or RFC 2136 dynamic updates to an authoritative server). Run is the
// etcd-dns-registrar daemon's loop. It links no etcd code; only
// cmd/etcd-dns-registrar and tests import it.
package dns

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Prefix is where the registry lives in the store: Prefix+<name>.json.
const Prefix = "etcdadm/dns/"

// Record is one member name and where it runs. Expires is the end of the
// publisher's lease: a record past it is treated as gone.
type Record struct {
	Name      string       `json:"name"`
	Addresses []netip.Addr `json:"addresses"`
	Updated   time.Time    `json:"updated"`
	Expires   time.Time    `json:"expires"`
}

// Live reports whether the lease still holds at now.
func (r Record) Live(now time.Time) bool { return now.Before(r.Expires) }

// CheckName accepts a member name usable as one DNS label.
func CheckName(name string) error {
	if err := pki.CheckMemberName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Publish writes this host's record. A member's name belongs to whichever
// host holds its volume (etcd-volume-attach's claim), so the last writer wins.
func Publish(ctx context.Context, st store.Store, r Record) error {
	if err := CheckName(r.Name); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, Prefix+r.Name+".json", b, store.PutOptions{}); err != nil {
		return fmt.Errorf("dns: publish %s: %w", r.Name, err)
	}
	return nil
}

// Records lists every record in the registry, live or expired, sorted by
// name. Entries that do not parse are skipped and reported in bad.
func Records(ctx context.Context, st store.Store) (recs []Record, bad []string, err error) {
	err = store.EachJSON(ctx, st, Prefix, 1<<16, func(name string, b []byte) error {
		var r Record
		if err := json.Unmarshal(b, &r); err != nil || r.Name != name || CheckName(r.Name) != nil {
			bad = append(bad, Prefix+name+".json")
			return nil
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dns: %w", err)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	return recs, bad, nil
}

// Host is what a provider publishes: a fully qualified name (no trailing
// dot) and its addresses; no addresses means the name must not resolve.
type Host struct {
	FQDN      string
	Addresses []netip.Addr
}

// Hosts turns records into the provider's view at now: live records with
// their addresses, expired ones with none, sorted by name.
func Hosts(recs []Record, suffix string, now time.Time) []Host {
	out := make([]Host, 0, len(recs))
	for _, r := range recs {
		h := Host{FQDN: r.Name + "." + strings.Trim(suffix, ".")}
		if r.Live(now) {
			h.Addresses = append([]netip.Addr(nil), r.Addresses...)
			sort.Slice(h.Addresses, func(i, j int) bool { return h.Addresses[i].Less(h.Addresses[j]) })
		}
		out = append(out, h)
	}
	return out
}
