package integration

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// TestCommandsEndWithoutQuorum (issue 26 finding 1): with 2 of 3 members
// stopped, and against endpoints that do not answer (a refused port, a
// port that accepts and never speaks), 'member list', 'member remove' and
// 'backup now' end within their bound (--dial-timeout 2s: each request
// 4s, the diagnosis 2s an endpoint) and say what they could not reach and
// what to do; they used to hang until killed. 'backup now' on the
// survivor takes the backup from it alone, says so, and 'backup list'
// marks it; the uploader's timer run skips, saying why; status says the
// survivor answers without a leader instead of "not reached".
func TestCommandsEndWithoutQuorum(t *testing.T) {
	ctx := ctxT(t)
	v := testenv.EtcdVersions()[1]
	ca := testenv.NewPKI(t)
	ms := testenv.StartEtcdCluster(t, v, 3, ca)
	dir := t.TempDir()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterspec.Seed(ctx, st, clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: v}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ms[0].Client(t).Put(ctx, "/registry/kept", "before the loss"); err != nil {
		t.Fatal(err)
	}
	url := "file://" + dir
	binary(t, "etcdadm") // built before the clock runs
	ms[1].Stop()
	ms[2].Stop()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accept, never answer
		for i := 0; i < 100; i++ {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	certs := []string{"--cacert", ca.CACert, "--cert", ca.ClientCert, "--key", ca.ClientKey, "--dial-timeout", "2s"}
	const bound = 15 * time.Second // 4s a request + 2s an endpoint's status, and slack for a loaded machine
	noQuorum := []string{"no quorum", "has no leader", ms[0].Endpoint(), "etcdadm recover --from-member"}
	for _, ep := range []struct{ name, url string }{{"survivor", ms[0].Endpoint()}, {"refused", "https://127.0.0.1:1"}, {"silent", "https://" + silent.Addr().String()}} {
		want := noQuorum
		if ep.name != "survivor" {
			want = []string{"did not answer at " + ep.url, "is etcd running there", "--endpoints"}
		}
		for _, tc := range []struct {
			name string
			args []string
			code int
			want []string
		}{
			{"member list", []string{"member", "list"}, 1, want},
			{"member remove", []string{"member", "remove", ms[2].Name}, 1, append(want, "Nothing was removed")},
			{"backup now", []string{"backup", "now", "--store", url}, 1, append(want, "No backup was taken")},
		} {
			if ep.name == "survivor" && tc.name == "backup now" {
				continue // below: it succeeds
			}
			t.Run(ep.name+"/"+tc.name, func(t *testing.T) {
				start := time.Now()
				r := runBin(t, nil, "etcdadm", append(append(tc.args, "--endpoints", ep.url), certs...)...)
				took := time.Since(start)
				if took > bound {
					t.Errorf("took %s, want at most %s", took.Round(time.Second), bound)
				}
				if r.code != tc.code {
					t.Errorf("exit %d, want %d\n%s%s", r.code, tc.code, r.stdout, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
					}
				}
			})
		}
	}

	// status says the survivor answers, without a leader; not "not reached".
	start := time.Now()
	r := runBin(t, nil, "etcdadm", append([]string{"status", "--units=false", "--endpoints", ms[0].Endpoint()}, certs...)...)
	if took := time.Since(start); took > bound || r.code != 1 || !strings.Contains(r.stdout, "etcd: NO QUORUM: etcd answers at "+ms[0].Endpoint()+" but has no leader") || strings.Contains(r.stdout, "NOT REACHED") {
		t.Errorf("status on the survivor: exit %d in %s\n%s%s", r.code, took.Round(time.Second), r.stdout, r.stderr)
	}

	// backup now on the survivor: taken from it alone, and marked.
	start = time.Now()
	r = runBin(t, nil, "etcdadm", append([]string{"backup", "now", "--store", url, "--endpoints", ms[0].Endpoint()}, certs...)...)
	if took := time.Since(start); took > bound || r.code != 0 || !strings.Contains(r.stdout, "NO QUORUM") || !strings.Contains(r.stdout, ms[0].Name+"'s data alone") {
		t.Fatalf("backup now on the survivor: exit %d in %s\n%s%s", r.code, took.Round(time.Second), r.stdout, r.stderr)
	}
	r = runBin(t, nil, "etcdadm", "backup", "list", "--store", url)
	if !strings.Contains(r.stdout, "NO QUORUM ("+ms[0].Name+" alone)") {
		t.Errorf("backup list does not mark it:\n%s%s", r.stdout, r.stderr)
	}
	r = runBin(t, nil, "etcdadm", "backup", "list", "--store", url, "-o", "json")
	var rows []struct {
		Name          string `json:"name"`
		WithoutQuorum bool   `json:"withoutQuorum"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || !rows[0].WithoutQuorum {
		t.Errorf("backup list -o json: %v %+v\n%s", err, rows, r.stdout)
	}
	if r := runBin(t, nil, "etcdadm", "backup", "verify", "latest", "--restore-test", "--store", url); r.code != 0 {
		t.Errorf("the survivor's backup does not verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The meta file is etcd-manager's, unchanged: the mark is ours only.
	if len(rows) == 1 {
		if b, _, err := st.Get(ctx, rows[0].Name+"/"+etcdmanager.MetaFile); err == nil {
			defer b.Close()
			var meta map[string]any
			if err := json.NewDecoder(b).Decode(&meta); err != nil || meta["withoutQuorum"] != nil || len(meta) != 3 {
				t.Errorf("meta file: %v %v", meta, err)
			}
		}
	}

	// The timer's run skips: the leader backs up, and there is none.
	start = time.Now()
	r = runBin(t, []string{"ETCDADM_LOG_LEVEL=info"}, "etcd-snapshot-uploader", append([]string{"--store", url, "--endpoints", ms[0].Endpoint()}, certs...)...)
	if took := time.Since(start); took > bound || r.code != 0 || !strings.Contains(r.stderr, "has no leader") || !strings.Contains(r.stderr, "backup now") {
		t.Errorf("uploader on the survivor: exit %d in %s\n%s%s", r.code, took.Round(time.Second), r.stdout, r.stderr)
	}
}
