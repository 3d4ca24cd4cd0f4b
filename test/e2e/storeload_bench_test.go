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
)

// BenchmarkStoreLoad: the store requests of an idle, healthy cluster of
// pool-volume masters with the DNS registrar, every interval at its
// default (volume lease 2m, registrar 30 s, backups every 15 min),
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
	c, _, _ := newPoolClusterWith(b, names, clusterOptions{members: n, dnsSuffix: volSuffix, enable: []string{"etcd-dns-registrar.service"},
		env: map[string]string{"ETCDADM_VOLUME_PROVIDER": "pool", "ETCDADM_VOLUME_SIZE": "512M"}})
	time.Sleep(time.Minute)
	before := s3Requests(b, c)
	time.Sleep(idle)
	after := s3Requests(b, c)
	perDay := float64(24*time.Hour) / float64(idle)
	var total, writes float64
	fmt.Printf("FIGURE store requests of an idle %d-master pool cluster with the DNS registrar, over %v, per day:\n", n, idle)
	for _, api := range slices.Sorted(maps.Keys(after)) {
		d := after[api] - before[api]
		if d == 0 {
			continue
		}
		total += d
		if api == "putobject" || strings.HasPrefix(api, "listobjects") {
			writes += d
		}
		fmt.Printf("FIGURE   %-24s %6.0f  %8.0f/day\n", api, d, d*perDay)
	}
	fmt.Printf("FIGURE   %-24s %6.0f  %8.0f/day\n", "PUT + LIST", writes, writes*perDay)
	fmt.Printf("FIGURE   %-24s %6.0f  %8.0f/day\n", "total", total, total*perDay)
	b.ReportMetric(total*perDay, "requests/day")
	b.ReportMetric(writes*perDay, "put+list/day")
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
