// Package join benchmarks etcd-member-join on loopback: the time from
// starting three members at once to a healthy cluster, and the time to
// replace a member whose data is gone. Run by make bench; figures in
// docs/benchmarks.md.
package join

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/test/localcluster"
)

const (
	version = "3.6.16"
	reps    = 10
)

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
}

func found(b *testing.B, ctx context.Context) ([]*localcluster.Host, time.Duration) {
	st := localcluster.Seed(b, 3, version)
	hosts := []*localcluster.Host{
		localcluster.NewHost(b, st, "etcd-a", version),
		localcluster.NewHost(b, st, "etcd-b", version),
		localcluster.NewHost(b, st, "etcd-c", version),
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Join(ctx)
			if err == nil && res.Action != member.Found {
				err = fmt.Errorf("%s: %s (%s)", h.Name, res.Action, res.Reason)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return hosts, took
}

// BenchmarkFoundThree: concurrent start of 3 members to the moment every
// member-join has returned (each returns once its member serves
// linearizable reads), median of 10.
func BenchmarkFoundThree(b *testing.B) {
	ctx := context.Background()
	var ds []time.Duration
	for range reps {
		hosts, took := found(b, ctx)
		ds = append(ds, took)
		for _, h := range hosts {
			h.Runner.Kill(ctx)
		}
	}
	b.ReportMetric(median(ds).Seconds(), "median-s")
	b.ReportMetric(slices.Max(ds).Seconds(), "max-s")
	b.Logf("found 3 members, %d runs: median %v, min %v, max %v", reps, median(ds).Round(time.Millisecond), slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}

// BenchmarkReplace: a member whose data is gone comes back (backup,
// remove, add as learner, catch up, promote), median of 10.
func BenchmarkReplace(b *testing.B) {
	ctx := context.Background()
	hosts, _ := found(b, ctx)
	victim := hosts[1]
	var ds []time.Duration
	for i := range reps {
		victim.Runner.Kill(ctx)
		data := filepath.Join(victim.Cfg.Root, "var/lib/etcd")
		if err := os.Rename(data, data+".lost-"+time.Now().Format("150405.000")+"-"+string(rune('a'+i))); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := victim.Join(ctx)
		if err != nil || res.Action != member.Replace {
			b.Fatalf("replace %d: %v %+v", i, err, res)
		}
		ds = append(ds, time.Since(start))
	}
	b.ReportMetric(median(ds).Seconds(), "median-s")
	b.Logf("replace a member, %d runs: median %v, min %v, max %v", reps, median(ds).Round(time.Millisecond), slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}
