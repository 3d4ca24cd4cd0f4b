// Package dns keeps every etcd member name resolvable: each host publishes
// the address of the member it runs in the store's registry (a lease it
// renews), learns the others' and hands the live set to a Provider (a managed /etc/hosts
// block, or RFC 2136 dynamic updates to an authoritative server). Run is the
// etcd-dns-registrar daemon's loop. It links no etcd code; only
// cmd/etcd-dns-registrar and tests import it.
package dns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// RegistryKey is the registry: every member name's record in one store
// object, so a round costs one read whatever the cluster's size, and a
// write only when this host's record changes or is due for renewal. It
// is written only compare-and-swap on the ETag just read.
const RegistryKey = "etcdadm/dns/registry.json"

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

// registry is RegistryKey's content.
type registry struct {
	Records []Record `json:"records"`
}

// Load reads the registry: every record, live or expired, sorted by name,
// and the object's ETag ("" when nobody published yet). Records with an
// invalid name are skipped and reported in bad.
func Load(ctx context.Context, st store.Store) (recs []Record, bad []string, etag string, err error) {
	b, info, err := store.GetBytes(ctx, st, RegistryKey, 1<<20)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, "", nil
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("dns: %w", err)
	}
	var reg registry
	if err := json.Unmarshal(b, &reg); err != nil {
		// Unreadable: a publisher replaces it (compare-and-swap on this
		// ETag) with its own record; the others follow within a round.
		return nil, []string{RegistryKey + ": " + err.Error()}, info.ETag, nil
	}
	for _, r := range reg.Records {
		if CheckName(r.Name) != nil {
			bad = append(bad, fmt.Sprintf("%s: record %q", RegistryKey, r.Name))
			continue
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	return recs, bad, info.ETag, nil
}

// Publish puts r into the registry read as recs at etag, dropping records
// expired before forgetBefore, and returns the registry written. The
// write is conditional on etag: store.ErrPrecondition when another host
// wrote meanwhile (read again and retry). A member's name belongs to
// whichever host holds its volume (etcd-volume-attach's claim), so the
// last writer of a name wins.
func Publish(ctx context.Context, st store.Store, recs []Record, etag string, r Record, forgetBefore time.Time) ([]Record, string, error) {
	if err := CheckName(r.Name); err != nil {
		return nil, "", err
	}
	out := []Record{r}
	for _, x := range recs {
		if x.Name != r.Name && !x.Expires.Before(forgetBefore) {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	b, err := json.MarshalIndent(registry{Records: out}, "", "  ")
	if err != nil {
		return nil, "", err
	}
	opts := store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""}
	info, err := store.PutBytes(ctx, st, RegistryKey, b, opts)
	if err != nil {
		return nil, "", fmt.Errorf("dns: publish %s: %w", r.Name, err)
	}
	return out, info.ETag, nil
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
