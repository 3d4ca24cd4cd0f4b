//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// storeOutage is how long TestStoreOutage keeps the store down: 10
// minutes, five times the default lease (E2E_STORE_OUTAGE shortens it
// while working on the test).
func storeOutage(t *testing.T) time.Duration {
	if v := os.Getenv("E2E_STORE_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("E2E_STORE_OUTAGE: %v", err)
		}
		return d
	}
	return 10 * time.Minute
}

// TestStoreOutage: three pool masters under a client load lose the store
// for 10 minutes (20 leases of the test's 30 s). Their claims are also
// held in etcd, renewed through their own members, so no host fences,
// no write fails, and when the store comes back every claim is renewed
// there again with nothing for the operator to do.
func TestStoreOutage(t *testing.T) {
	// Ten minutes of mostly waiting: beside the other parallel tests in
	// make test rather than after them.
	t.Parallel()
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	c, _, hosts := newPoolCluster(t, names)
	all := poolHosts(hosts, names)
	waitClaimsInEtcd(t, all, names)
	load := startClientLoad(t, c, hostURLs(all, 2379))
	time.Sleep(3 * time.Second) // writes before the outage

	outage := storeOutage(t)
	c.stopStore()
	down := time.Now()
	t.Logf("store stopped for %v", outage)
	checks := 0
	for time.Since(down) < outage {
		time.Sleep(min(30*time.Second, outage-time.Since(down)))
		for _, h := range all {
			requireServing(t, h, fmt.Sprintf("%v into the store outage", time.Since(down).Round(time.Second)))
		}
		checks++
	}
	// Long past its store lease, each claim is confirmed through etcd.
	for _, h := range all {
		if r := claimRecordOf(t, h); r.Source != "etcd" {
			t.Errorf("%s: at the end of the outage the claim was last confirmed by %q, want etcd", h.Name(), r.Source)
		}
	}
	back := time.Now()
	if err := c.runStore(); err != nil {
		t.Fatal(err)
	}
	// Back: each host's renewal finds its lapsed store claim untaken and
	// renews it there again.
	for _, h := range all {
		waitFor(t, 3*volume.RenewEvery(volumeLease)+30*time.Second, h.Name()+"'s claim renewed in the store again", func() (bool, string) {
			r := claimRecordOf(t, h)
			return r.Source == "store+etcd" && r.Confirmed.Store.After(back), fmt.Sprintf("%+v", r)
		})
	}
	renewedIn := time.Since(back)
	rep := load.finish(t)
	waitHealthy(t, all[0], names, time.Minute)
	for _, h := range all {
		requireServing(t, h, "after the store came back")
		if log := unitLog(t, h, "etcd-volume-renew"); strings.Contains(log, "FENCING") {
			t.Errorf("%s fenced during the store outage:\n%s", h.Name(), log)
		}
		// What needs the store failed meanwhile and succeeds on its
		// timer's next run; nothing of the claim's.
		t.Logf("%s: failed units after the outage: %s", h.Name(), strings.Join(strings.Fields(h.MustExec(t, "systemctl", "--failed", "--no-legend", "--plain", "--full")), " "))
	}
	t.Logf("FIGURE store outage %v (lease %v): %d acked writes, %d failed tries, %d lost, watch missed %d, longest stall %s; 0 hosts fenced (%d checks of 3 hosts); every claim renewed in the store again %v after it was started again",
		outage, volumeLease, rep.Acked, rep.FailedTries, rep.Lost, rep.WatchMissed, rep.LongestFail, checks, renewedIn.Round(100*time.Millisecond))
	if rep.FailedTries != 0 || rep.Lost != 0 || rep.WatchMissed != 0 || rep.Acked == 0 {
		t.Errorf("client load through the store outage: %+v, want every write acknowledged, none lost", rep)
	}
}

// TestPoolCutOff: three pool masters under a client load.
//   - store-only: a host cut off from the store alone keeps its member
//     (its claim is confirmed through etcd).
//   - fence-and-back: a host cut off from the store and its peers fences
//     before its claim could be taken; back on the network it is a voting
//     member again within a minute, without a reboot.
//   - takeover: a host cut off for good fences, and a fresh host takes
//     its volume over once neither the store nor etcd holds the claim,
//     after the fence.
func TestPoolCutOff(t *testing.T) {
	outer := t
	names := []string{"etcd-a", "etcd-b", "etcd-c"}
	c, _, hosts := newPoolCluster(t, names)
	all := poolHosts(hosts, names)
	waitClaimsInEtcd(t, all, names)
	load := startClientLoad(t, c, hostURLs(all, 2379))
	every := volume.RenewEvery(volumeLease)

	t.Run("store-only", func(t *testing.T) {
		h := hosts["etcd-c"]
		store := c.n.SwitchIP().String() + "/32"
		h.MustExec(t, "ip", "route", "add", "blackhole", store)
		cut := time.Now()
		// Past the store lease and two renewals more: still serving.
		time.Sleep(volumeLease + 2*every)
		requireServing(t, h, fmt.Sprintf("%v cut off from the store", time.Since(cut).Round(time.Second)))
		if r := claimRecordOf(t, h); r.Source != "etcd" || !r.Confirmed.Store.Before(time.Now()) {
			t.Errorf("claim record after %v without the store: %+v, want confirmed by etcd alone, store lapsed", time.Since(cut).Round(time.Second), r)
		}
		h.MustExec(t, "ip", "route", "del", "blackhole", store)
		waitFor(t, 3*every, "the claim renewed in the store again", func() (bool, string) {
			r := claimRecordOf(t, h)
			return r.Source == "store+etcd", fmt.Sprintf("%+v", r)
		})
		t.Logf("FIGURE cut off from the store only for %v (lease %v): kept its member, claim confirmed through etcd", volumeLease+2*every, volumeLease)
	})

	t.Run("fence-and-back", func(t *testing.T) {
		h := hosts["etcd-c"]
		h.Partition(t, true)
		cut := time.Now()
		fencedAt := waitFenced(t, h, cut)
		last := claimRecordOf(t, h)
		until := last.Confirmed.Store
		if last.Confirmed.Etcd.After(until) {
			until = last.Confirmed.Etcd
		}
		if !fencedAt.Before(until) {
			t.Errorf("fenced at %s, after the claim ran out (%s)", fencedAt.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
		}
		h.Partition(t, false)
		healed := time.Now()
		waitFor(t, time.Minute, "the fenced host a voting member again", func() (bool, string) {
			st, err := status(t, all[0])
			if err != nil {
				return false, err.Error()
			}
			for _, m := range st.Members {
				if m.Name == "etcd-c" {
					return m.Healthy && !m.Learner && !fenced(t, h), fmt.Sprintf("%+v", m)
				}
			}
			return false, fmt.Sprintf("%+v", st.Members)
		})
		back := time.Since(healed)
		if log := unitLog(t, h, "etcd-volume-renew"); !strings.Contains(log, "UN-FENCING") {
			t.Errorf("renew log does not say it un-fenced:\n%s", log)
		}
		t.Logf("FIGURE cut off from store and peers: fenced %v after the cut, %v before the claim ran out (lease %v); back on the network -> voting member again: %v, no reboot",
			fencedAt.Sub(cut).Round(100*time.Millisecond), until.Sub(fencedAt).Round(100*time.Millisecond), volumeLease, back.Round(100*time.Millisecond))
	})

	t.Run("takeover", func(t *testing.T) {
		h := hosts["etcd-b"]
		h.Partition(t, true)
		cut := time.Now()
		fresh := c.boot(outer, "master-4")
		fencedAt := waitFenced(t, h, cut)
		if got := identity(t, fresh); got != "etcd-b" {
			t.Fatalf("the fresh host took %s, want etcd-b", got)
		}
		waitHealthy(t, all[0], names, 3*time.Minute)
		took := time.Since(cut)
		tookOver, ok := journalTime(t, fresh, "etcd-volume-attach", "took over an expired volume")
		if !ok {
			t.Fatalf("the fresh host did not take etcd-b over:\n%s", unitLog(t, fresh, "etcd-volume-attach"))
		}
		if !fencedAt.Before(tookOver) {
			t.Errorf("the cut-off host fenced at %s, after the fresh host took its volume over at %s", fencedAt.Format(time.RFC3339Nano), tookOver.Format(time.RFC3339Nano))
		}
		// It asked etcd (through the members the claims name, with a
		// certificate of its own from the store's CA) before taking over.
		if attach := unitLog(t, fresh, "etcd-volume-attach"); !strings.Contains(attach, "the claim expired in the store and in etcd") {
			t.Errorf("the fresh host did not find the claim expired in etcd before taking over:\n%s", attach)
		}
		if join := unitLog(t, fresh, "etcd-member-join"); !strings.Contains(join, "rejoin: ") {
			t.Errorf("member join on the fresh host did not rejoin on the volume's data:\n%s", join)
		}
		t.Logf("FIGURE pool takeover, holder cut off from store and peers: fenced %v after the cut; fresh host took etcd-b over %v after the fence; cut -> 3/3 healthy with the fresh host: %v (lease %v)",
			fencedAt.Sub(cut).Round(100*time.Millisecond), tookOver.Sub(fencedAt).Round(100*time.Millisecond), took.Round(100*time.Millisecond), volumeLease)
		// Back on the network, the host whose claim was taken stays down.
		h.Partition(t, false)
		time.Sleep(2 * every)
		if active := strings.TrimSpace(h.MustExec(t, "sh", "-c", "systemctl is-active etcd.service || true")); active == "active" || !fenced(t, h) {
			t.Errorf("the host whose volume was taken over runs etcd (%s) or is not fenced", active)
		}
		if log := unitLog(t, h, "etcd-volume-renew"); !strings.Contains(log, "taken over by another host") {
			t.Errorf("renew log does not say the claim was taken over:\n%s", log)
		}
		waitHealthy(t, all[0], names, time.Minute)
	})

	rep := load.finish(t)
	t.Logf("FIGURE client load through the cut-offs: %d acked writes, %d failed tries, %d lost, watch missed %d, longest stall %s", rep.Acked, rep.FailedTries, rep.Lost, rep.WatchMissed, rep.LongestFail)
	if rep.Lost != 0 || rep.WatchMissed != 0 || rep.Acked == 0 {
		t.Errorf("client load: %+v, want no acknowledged write lost", rep)
	}
}

// poolHosts are hosts by member name, in names' order.
func poolHosts(hosts map[string]*harness.Host, names []string) []*harness.Host {
	var out []*harness.Host
	for _, n := range names {
		out = append(out, hosts[n])
	}
	return out
}

// waitClaimsInEtcd waits until etcd holds every member's claim (the
// first renewal after the member runs puts it there).
func waitClaimsInEtcd(t *testing.T, hs []*harness.Host, names []string) {
	t.Helper()
	waitFor(t, 3*volume.RenewEvery(volumeLease)+30*time.Second, "every claim in etcd", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _, err := hs[0].Exec(t, ctx, append(strings.Fields(etcdctl), "get", "--prefix", "--print-value-only", volume.EtcdClaimPrefix)...)
		if err != nil {
			return false, err.Error()
		}
		for _, n := range names {
			if !strings.Contains(out, `"volume":"`+n+`"`) {
				return false, out
			}
		}
		return true, ""
	})
}

// claimRecord is what /run/etcdadm/claim.json says.
type claimRecord struct {
	Volume    string `json:"volume"`
	Source    string `json:"source"`
	Confirmed struct {
		Store time.Time `json:"store"`
		Etcd  time.Time `json:"etcd"`
	} `json:"confirmed"`
}

func claimRecordOf(t *testing.T, h *harness.Host) claimRecord {
	t.Helper()
	var r claimRecord
	if err := json.Unmarshal([]byte(h.MustExec(t, "cat", volume.ClaimFile)), &r); err != nil {
		t.Fatalf("%s: %s: %v", h.Name(), volume.ClaimFile, err)
	}
	return r
}

func fenced(t *testing.T, h *harness.Host) bool {
	t.Helper()
	return strings.TrimSpace(h.MustExec(t, "sh", "-c", "test -e "+volume.FencedFile+" && echo yes || echo no")) == "yes"
}

// requireServing fails unless h runs its member on its mounted volume,
// unfenced.
func requireServing(t *testing.T, h *harness.Host, when string) {
	t.Helper()
	out := h.MustExec(t, "sh", "-c", "systemctl is-active etcd.service etcd-volume-attach.service etcd-volume-renew.timer; findmnt -n -o FSTYPE /var/lib/etcd || echo unmounted; test -e "+volume.FencedFile+" && echo fenced || echo unfenced")
	if f := strings.Fields(out); len(f) != 5 || f[0] != "active" || f[1] != "active" || f[2] != "active" || f[3] != "ext4" || f[4] != "unfenced" {
		t.Fatalf("%s %s: etcd, etcd-volume-attach, the renew timer, /var/lib/etcd, fence: %v\n%s", h.Name(), when, f, unitLog(t, h, "etcd-volume-renew"))
	}
}

// waitFenced waits until h has fenced itself (cut is when it was cut
// off) and returns when it did, from its journal.
func waitFenced(t *testing.T, h *harness.Host, cut time.Time) time.Time {
	t.Helper()
	waitFor(t, volumeLease+30*time.Second, h.Name()+" fenced", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _, _ := h.Exec(t, ctx, "sh", "-c", "systemctl is-active etcd.service; findmnt -n /var/lib/etcd || echo unmounted")
		return strings.Fields(out + " x")[0] != "active" && strings.Contains(out, "unmounted"), out
	})
	at, ok := journalTime(t, h, "etcd-volume-renew", "FENCING")
	if !ok || at.Before(cut) {
		t.Fatalf("%s: no FENCING in the renew log after the cut:\n%s", h.Name(), unitLog(t, h, "etcd-volume-renew"))
	}
	return at
}

// journalTime is when unit last logged a line containing s (hosts share
// the test machine's clock).
func journalTime(t *testing.T, h *harness.Host, unit, s string) (time.Time, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _, _ := h.Exec(t, ctx, "journalctl", "--no-pager", "-o", "short-unix", "-u", unit)
	var at time.Time
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		f := strings.Fields(line)
		if sec, err := strconv.ParseFloat(f[0], 64); err == nil {
			at = time.Unix(0, int64(sec*1e9))
		}
	}
	return at, !at.IsZero()
}
