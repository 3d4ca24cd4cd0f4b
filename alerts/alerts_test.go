package alerts

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/dns"
	"github.com/etcdadm/etcdadm-immutable/internal/joinrun"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/rollout"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatalf("promtool not found (Debian package prometheus; make components installs it): %v", err)
	}
	out, err := exec.Command("promtool", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The rules load, and every alert fires when it should and not before
// (etcdadm-alerts.test.yml).
func TestRulesPromtool(t *testing.T) {
	promtool(t, "check", "rules", "etcdadm-alerts.yml")
	promtool(t, "test", "rules", "etcdadm-alerts.test.yml")
}

var metricName = regexp.MustCompile(`\betcd(?:adm)?_[a-z_]+\b`)

// Every etcd_* and etcdadm_* metric the rules or their tests name is one
// that our binaries' metric writers or every supported etcd write: a
// renamed metric fails here, not silently in an operator's Prometheus.
func TestRulesNameRealMetrics(t *testing.T) {
	written := ourMetrics(t)
	for _, v := range testenv.EtcdVersions() {
		for name := range etcdMetrics(t, v) {
			written[name+"@"+v] = true
		}
	}
	for _, file := range []string{"etcdadm-alerts.yml", "etcdadm-alerts.test.yml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var named []string
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "summary:") || strings.HasPrefix(line, "description:") {
				continue
			}
			named = append(named, metricName.FindAllString(line, -1)...)
		}
		slices.Sort(named)
		named = slices.Compact(named)
		if len(named) < 5 {
			t.Fatalf("%s names only %v: the pattern no longer finds the metrics", file, named)
		}
		for _, name := range named {
			if strings.HasPrefix(name, "etcdadm_") {
				if !written[name] {
					t.Errorf("%s names %s, which none of our binaries writes", file, name)
				}
				continue
			}
			for _, v := range testenv.EtcdVersions() {
				if !written[name+"@"+v] {
					t.Errorf("%s names %s, which etcd %s does not serve", file, name, v)
				}
			}
		}
	}
}

// ourMetrics runs every metric writer of ours into a temp file and returns
// the names they wrote.
func ourMetrics(t *testing.T) map[string]bool {
	dir := t.TempDir()
	now := time.Now()
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := &rollout.Record{Target: "3.6.16", State: rollout.Running, Started: now}
	volRoot := t.TempDir()
	os.MkdirAll(filepath.Join(volRoot, "run/etcdadm"), 0o755)
	claim := `{"volume":"etcd-a","holder":"h","expires":"` + now.Add(time.Minute).UTC().Format(time.RFC3339) + `","generation":1}`
	if err := os.WriteFile(filepath.Join(volRoot, volume.ClaimFile), []byte(claim), 0o644); err != nil {
		t.Fatal(err)
	}
	certs := testenv.NewPKI(t)
	writers := map[string]func(path string) error{
		"uploader": func(p string) error { return uploader.WriteTextfile(p, uploader.Outcome{}, nil, now) },
		"switcher": func(p string) error {
			return rollout.WriteMetrics(context.Background(), p, st, rollout.Outcome{Record: rec}, nil, now)
		},
		"registrar": func(p string) error { return dns.WriteMetrics(p, dns.Status{}) },
		"volume": func(p string) error {
			return volume.WriteMetrics(p, volume.Config{Provider: volume.ProviderPool, Root: volRoot, Lease: 2 * time.Minute}, nil, now)
		},
		"pki": func(p string) error { return pki.WriteMetrics(p, certs.Dir, nil, now) },
		"reconcile": func(p string) error {
			return joinrun.WriteMetrics(p, []member.Seen{{Name: "etcd-a", Healthy: true}}, nil, now)
		},
	}
	out := map[string]bool{}
	for who, write := range writers {
		path := filepath.Join(dir, who+".prom")
		if err := write(path); err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				out[metricName.FindString(line)] = true
			}
		}
	}
	return out
}

// etcdMetrics is the metric names a real etcd of version v serves.
func etcdMetrics(t *testing.T, v string) map[string]bool {
	certs := testenv.NewPKI(t)
	m := testenv.StartEtcdCluster(t, v, 1, certs)[0]
	defer m.Stop()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: certs.ClientTLS(t)}}
	resp, err := c.Get(m.ClientURL + "/metrics")
	if err != nil {
		t.Fatalf("etcd %s /metrics: %v", v, err)
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); !strings.HasPrefix(line, "#") {
			if n := metricName.FindString(line); n != "" {
				out[n] = true
			}
		}
	}
	if !out["etcd_server_has_leader"] && len(out) < 10 {
		t.Fatalf("etcd %s served %d etcd_* metrics", v, len(out))
	}
	return out
}
