package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Report is the verdict on a workload. Violations, Lost, WatchGaps,
// WatchOutOfOrder, WatchDuplicates and WatchPhantoms must all be 0, and
// Linearizable "Ok".
type Report struct {
	Operations int            `json:"operations"`
	ByKind     map[string]int `json:"byKind"`
	Acked      int            `json:"ackedWrites"`
	// Linearizable is porcupine's verdict on the whole history: Ok,
	// Illegal, or Unknown (the check timed out).
	Linearizable string `json:"linearizable"`
	Violations   int    `json:"violations"` // keys whose history is not linearizable
	CheckTook    string `json:"checkTook"`
	Visualized   string `json:"visualized,omitempty"`
	// Lost: acknowledged writes that etcd's history does not hold at
	// their revision with their value.
	Lost            int      `json:"lostWrites"`
	WatchEvents     int      `json:"watchEvents"`
	WatchResumes    int      `json:"watchResumes"`
	WatchGaps       int      `json:"watchGaps"`       // in etcd's history, never delivered
	WatchOutOfOrder int      `json:"watchOutOfOrder"` // delivered at a lower revision than one before
	WatchDuplicates int      `json:"watchDuplicates"` // delivered twice
	WatchPhantoms   int      `json:"watchPhantoms"`   // delivered, not in etcd's history
	WatchErrors     []string `json:"watchErrors,omitempty"`
	LeaseAlive      bool     `json:"leaseAlive"`
}

// Failed reports what in r breaks a promise, or "".
func (r Report) Failed() string {
	if r.Linearizable != string(porcupine.Ok) || r.Violations+r.Lost+r.WatchGaps+r.WatchOutOfOrder+r.WatchDuplicates+r.WatchPhantoms > 0 || !r.LeaseAlive {
		return fmt.Sprintf("linearizable %s, %d violations, %d lost writes, watch: %d gaps, %d out of order, %d duplicates, %d phantoms, lease alive %v",
			r.Linearizable, r.Violations, r.Lost, r.WatchGaps, r.WatchOutOfOrder, r.WatchDuplicates, r.WatchPhantoms, r.LeaseAlive)
	}
	return ""
}

// Stop ends the workload and judges it. The cluster must answer again
// (within a minute) for the final reads. visualize, if set, is where a
// non-linearizable history is drawn (HTML).
func (w *Workload) Stop(ctx context.Context, checkTimeout time.Duration, visualize string) (Report, error) {
	close(w.stop)
	w.wg.Wait()
	defer w.close()
	var r Report
	// A marker write on the prefix: its revision is the end of the
	// history both watches must reach.
	var end int64
	if err := retry(ctx, time.Minute, func(ctx context.Context) error {
		pr, err := w.admin.Put(ctx, w.cfg.Prefix+"end", "end")
		if err == nil {
			end = pr.Header.Revision
		}
		return err
	}); err != nil {
		return r, fmt.Errorf("chaos: final write: %w", err)
	}
	_ = retry(ctx, time.Minute, func(ctx context.Context) error {
		ttl, err := w.admin.TimeToLive(ctx, w.lease)
		if err == nil {
			r.LeaseAlive = ttl.TTL > 0
		}
		return err
	})
	var live []Event
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		live, r.WatchResumes, r.WatchErrors = w.watch.snapshot()
		if (len(live) > 0 && live[len(live)-1].Rev >= end) || time.Now().After(deadline) {
			break
		}
	}
	w.cancel()
	<-w.watch.done
	history, err := w.replay(ctx, end)
	if err != nil {
		return r, err
	}
	r.WatchEvents = len(live)
	r.WatchGaps, r.WatchOutOfOrder, r.WatchDuplicates, r.WatchPhantoms = compareWatch(live, history)

	w.mu.Lock()
	ops, acked := w.history, w.acked
	r.ByKind = w.counts
	w.mu.Unlock()
	r.Operations, r.Acked = len(ops), len(acked)
	r.Lost = lost(acked, history)

	model := Model()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, checkTimeout)
	r.CheckTook = time.Since(start).Round(time.Millisecond).String()
	r.Linearizable = string(res)
	if res == porcupine.Illegal {
		for _, part := range byKey(ops) {
			if porcupine.CheckOperationsTimeout(model, part, checkTimeout) == porcupine.Illegal {
				r.Violations++
			}
		}
		if visualize != "" && porcupine.VisualizePath(model, info, visualize) == nil {
			r.Visualized = visualize
		}
	}
	return r, nil
}

// replay reads etcd's own record of every change on the prefix from the
// workload's start to end: a fresh watch from the first revision.
func (w *Workload) replay(ctx context.Context, end int64) ([]Event, error) {
	var out []Event
	err := retry(ctx, 2*time.Minute, func(context.Context) error {
		out = nil
		wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), time.Minute)
		defer cancel()
		for resp := range w.admin.Watch(wctx, w.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(w.rev0+1)) {
			if err := resp.Err(); err != nil {
				return err
			}
			for _, ev := range resp.Events {
				out = append(out, eventOf(ev))
				if ev.Kv.ModRevision >= end {
					return nil
				}
			}
		}
		return fmt.Errorf("chaos: the replay watch ended before revision %d", end)
	})
	return out, err
}

type revKey struct {
	rev int64
	key string
}

// compareWatch checks the live watch against etcd's history.
func compareWatch(live, history []Event) (gaps, outOfOrder, duplicates, phantoms int) {
	want := map[revKey]bool{}
	for _, e := range history {
		want[revKey{e.Rev, e.Key}] = true
	}
	got := map[revKey]bool{}
	var prev int64
	for _, e := range live {
		k := revKey{e.Rev, e.Key}
		switch {
		case got[k]:
			duplicates++
		case e.Rev < prev:
			outOfOrder++
		}
		if !want[k] {
			phantoms++
		}
		got[k] = true
		prev = max(prev, e.Rev)
	}
	for k := range want {
		if !got[k] {
			gaps++
		}
	}
	return
}

// lost counts acknowledged writes missing from etcd's history.
func lost(acked []Write, history []Event) int {
	at := map[revKey]string{}
	for _, e := range history {
		at[revKey{e.Rev, e.Key}] = e.Value
	}
	n := 0
	for _, a := range acked {
		if v, ok := at[revKey{a.Rev, a.Key}]; !ok || v != a.Value {
			n++
		}
	}
	return n
}
