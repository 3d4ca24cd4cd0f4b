//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/test/e2e/harness"
)

// BenchmarkStoreLoad: the store requests of an idle, healthy cluster of
// pool-volume masters with the DNS registrar, every interval at its
// default (volume lease 2m, registrar every minute, backups every 15 min),
// counted by MinIO per S3 API over ETCDADM_BENCH_STORE_IDLE (15m) after a
// minute to settle, and extrapolated to a day. ETCDADM_BENCH_STORE_MASTERS
// is the cluster's size (3).
//
//	ETCDADM_BENCH_STORE_MASTERS=3 go test -count=1 -run '^$' -bench StoreLoad -benchtime 1x -timeout 60m ./test/e2e/
func BenchmarkStoreLoad(b *testing.B) {
	idle := 15 * time.Minute
	if v := os.Getenv("ETCDADM_BENCH_STORE_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("ETCDADM_BENCH_STORE_IDLE=%q: %v", v, err)
		}
		idle = d
	}
	n := 3
	if v := os.Getenv("ETCDADM_BENCH_STORE_MASTERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 7 {
			b.Fatalf("ETCDADM_BENCH_STORE_MASTERS=%q: want 1 to 7", v)
		}
	}
	names := volume.Names(n)
	c, _, hosts := newPoolClusterWith(b, names, clusterOptions{members: n, dnsSuffix: volSuffix, enable: []string{"etcd-dns-registrar.service"},
		env: map[string]string{"ETCDADM_VOLUME_PROVIDER": "pool", "ETCDADM_VOLUME_SIZE": "512M"}})
	time.Sleep(time.Minute)
	before := s3Requests(b, c)
	time.Sleep(idle)
	d := diff(before, s3Requests(b, c))
	perDay := float64(24*time.Hour) / float64(idle)
	var total, putList float64
	fmt.Printf("FIGURE store requests of an idle %d-master pool cluster with the DNS registrar, over %v, per day:\n", n, idle)
	for _, api := range slices.Sorted(maps.Keys(d)) {
		d := d[api]
		total += d
		if api == "putobject" || strings.HasPrefix(api, "listobjects") {
			putList += d
		}
		fmt.Printf("FIGURE   %-24s %6.0f  %8.0f/day\n", api, d, d*perDay)
	}
	fmt.Printf("FIGURE   %-24s %6.0f  %8.0f/day\n", "PUT + LIST", putList, putList*perDay)
	fmt.Printf("FIGURE   %-24s %6.0f  %8.0f/day\n", "total", total, total*perDay)
	b.ReportMetric(total*perDay, "requests/day")
	b.ReportMetric(putList*perDay, "put+list/day")
	for _, name := range names {
		rss := hosts[name].MustExec(b, "sh", "-c", "grep VmRSS /proc/$(systemctl show -P MainPID etcd-dns-registrar.service)/status")
		fmt.Printf("FIGURE etcd-dns-registrar on %s after %v: %s\n", name, idle+time.Minute, strings.Join(strings.Fields(rss), " "))
	}
	attribute(b, c, names, hosts)
}

// periodic is a unit that asks the store something on a schedule, and how
// often it runs on each host (the timer's interval plus half its random
// delay, or the registrar's default interval).
var periodic = []struct {
	unit  string
	every time.Duration
}{
	{"etcd-volume-renew.service", 40 * time.Second},
	{"etcd-version-switcher.service", 5*time.Minute + 7500*time.Millisecond},
	{"etcd-member-join.service", 15*time.Minute + 15*time.Second},
	{"etcd-reconcile.service", 11 * time.Minute},
	{"etcd-snapshot-uploader.service", 15 * time.Minute},
	{"etcd-dns-registrar.service", time.Minute}, // last: it keeps running
}

// attribute stops every timer and the registrar, then runs each periodic
// unit once on every host (the registrar for one round once it settled)
// and prints each one's requests per run and per day: which sender the
// totals above come from.
func attribute(b *testing.B, c *cluster, names []string, hosts map[string]*harness.Host) {
	b.Helper()
	all := func(args ...string) {
		for _, name := range names {
			hosts[name].MustExec(b, args...)
		}
	}
	all("systemctl", "stop", "etcd-volume-renew.timer", "etcd-member-join.timer", "etcd-reconcile.timer",
		"etcd-version-switcher.timer", "etcd-snapshot-uploader.timer", "etcd-dns-registrar.service")
	// MinIO serves its counters from a cache renewed every 10 s: every
	// reading is taken 15 s after what it must include.
	const settle = 15 * time.Second
	time.Sleep(settle)
	before := s3Requests(b, c)
	time.Sleep(settle)
	if d := sum(diff(before, s3Requests(b, c))); d != 0 {
		b.Fatalf("the store saw %v requests with every sender stopped", d)
	}
	fmt.Printf("FIGURE requests per run on one host, and per day for %d hosts:\n", len(names))
	var day float64
	for _, p := range periodic {
		all("systemctl", "start", p.unit)
		if p.unit == "etcd-dns-registrar.service" {
			// Its first 2 minutes of quick rounds (and the settings it
			// reads at start) are left out: one round is counted.
			time.Sleep(2*time.Minute + settle)
			before = s3Requests(b, c)
			time.Sleep(p.every)
		} else {
			time.Sleep(settle)
		}
		after := s3Requests(b, c)
		d := diff(before, after)
		before = after
		perRun := sum(d) / float64(len(names))
		perDay := perRun * float64(len(names)) * float64(24*time.Hour) / float64(p.every)
		day += perDay
		var apis []string
		for _, api := range slices.Sorted(maps.Keys(d)) {
			apis = append(apis, fmt.Sprintf("%s %.1f", api, d[api]/float64(len(names))))
		}
		fmt.Printf("FIGURE   %-32s every %-8v %5.1f/run  %8.0f/day  (%s)\n", p.unit, p.every, perRun, perDay, strings.Join(apis, ", "))
	}
	fmt.Printf("FIGURE   %-32s %43.0f/day\n", "sum", day)
}

func diff(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for api, v := range after {
		if v-before[api] != 0 {
			d[api] = v - before[api]
		}
	}
	return d
}

func sum(m map[string]float64) (s float64) {
	for _, v := range m {
		s += v
	}
	return s
}

// s3Requests reads MinIO's request counters by API.
func s3Requests(b *testing.B, c *cluster) map[string]float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.n.Command(ctx, "curl", "-sf", "http://"+c.n.SwitchIP().String()+":9000/minio/v2/metrics/cluster").Output()
	if err != nil {
		b.Fatalf("MinIO metrics: %v", err)
	}
	reqs := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "minio_s3_requests_total{") {
			continue
		}
		labels, val, ok := strings.Cut(strings.TrimPrefix(line, "minio_s3_requests_total{"), "} ")
		if !ok {
			continue
		}
		_, api, ok := strings.Cut(labels, `api="`)
		if !ok {
			continue
		}
		api, _, _ = strings.Cut(api, `"`)
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			reqs[api] += v
		}
	}
	if len(reqs) == 0 {
		b.Fatalf("MinIO metrics hold no minio_s3_requests_total:\n%.2000s", out)
	}
	return reqs
}
