package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
	"github.com/etcdadm/etcdadm-immutable/test/testenv"
)

// storeStatusJSON is what a script reads of 'etcdadm status -o json' when
// etcd may not answer.
type storeStatusJSON struct {
	EtcdError string `json:"etcdError"`
	Spec      *struct {
		MemberCount int32  `json:"memberCount"`
		EtcdVersion string `json:"etcdVersion"`
	} `json:"spec"`
	LastBackup     string `json:"lastBackup"`
	PendingRestore *struct {
		ID     string `json:"id"`
		Backup string `json:"backup"`
	} `json:"pendingRestore"`
	Recover *struct {
		Member string `json:"member"`
		State  string `json:"state"`
	} `json:"recover"`
	Teardown *struct {
		At time.Time `json:"at"`
	} `json:"teardown"`
	Versions struct {
		Paused *struct{ By, Reason string } `json:"paused"`
	} `json:"versions"`
}

// TestStatusWithoutEtcd: an operator on a workstation without etcd's
// client certificates (or with the wrong ones) runs 'etcdadm status
// --store' on a store where the automation is paused and a restore waits
// for the hosts: status shows everything the store holds — the spec, the
// pause, the pending restore, the last backup — says plainly that etcd
// was not reached and why, exits 1, and does not hang; it also says the
// CA runs out within 90 days and how to rotate it. Then a recovery and
// a teardown, which also live only in the store. 'etcdadm spec show'
// says the automation is paused.
func TestStatusWithoutEtcd(t *testing.T) {
	pki := testenv.NewPKI(t)
	v := testenv.EtcdVersions()[1]
	m := testenv.StartEtcdCluster(t, v, 1, pki)[0]
	dir := t.TempDir()
	url := "file://" + dir
	etcdadm := func(args ...string) result { return runBin(t, nil, "etcdadm", args...) }
	for _, args := range [][]string{
		{"seed", "--members", "3", "--version", v, "--store", url},
		// A CA with 30 days left: status says to rotate it.
		{"pki", "init", "--ca-validity", "720h", "--store", url},
		append([]string{"backup", "now", "--store", url}, tlsArgs(m, pki)...),
		{"restore", "latest", "--yes", "--store", url},
		{"pause", "--reason", "replacing etcd-c's disk", "--store", url},
	} {
		if r := etcdadm(args...); r.code != 0 {
			t.Fatalf("etcdadm %v: %+v", args, r)
		}
	}
	r := etcdadm("backup", "list", "--store", url, "-o", "json")
	var backups []struct{ Name string }
	if err := json.Unmarshal([]byte(r.stdout), &backups); err != nil || len(backups) != 1 {
		t.Fatalf("backup list: %v %+v", err, r)
	}
	latest := backups[0].Name
	// What the store says, whatever etcd does.
	storeSide := []string{
		"3 members, etcd " + v,
		"PAUSED", "replacing etcd-c's disk", "etcdadm resume",
		"RESTORE", "backup " + latest, "requested",
		"last backup: " + latest,
		"CA EXPIRES", "(in 29d)", "etcdadm pki rotate-ca",
	}

	missing := filepath.Join(t.TempDir(), "no-pki")
	other := testenv.NewPKI(t)
	cases := []struct {
		name string
		args []string
		env  []string
		why  []string // what the etcd line says
	}{
		{
			name: "no client certificate",
			args: []string{"--endpoints", m.Endpoint()},
			env:  []string{"ETCDADM_CACERT=" + missing + "/ca.crt", "ETCDADM_CERT=" + missing + "/client.crt", "ETCDADM_KEY=" + missing + "/client.key"},
			why:  []string{"etcd: NOT REACHED", "client.crt", "pki issue-client"},
		},
		{
			name: "another CA's certificate",
			args: []string{"--endpoints", m.Endpoint(), "--cacert", other.CACert, "--cert", other.ClientCert, "--key", other.ClientKey, "--dial-timeout", "2s"},
			why:  []string{"etcd: NOT REACHED", "unknown authority", "--cacert is not the CA"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := runBin(t, tc.env, "etcdadm", append([]string{"status", "--units=false", "--store", url}, tc.args...)...)
			if took := time.Since(start); took > 40*time.Second {
				t.Errorf("status took %v without etcd", took)
			}
			if r.code != 1 {
				t.Errorf("exit %d, want 1 (etcd not reached)", r.code)
			}
			for _, want := range append(storeSide, tc.why...) {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("status does not say %q:\n%s\nstderr: %s", want, r.stdout, r.stderr)
				}
			}
			r = runBin(t, tc.env, "etcdadm", append([]string{"status", "--units=false", "--store", url, "-o", "json"}, tc.args...)...)
			var js storeStatusJSON
			if err := json.Unmarshal([]byte(r.stdout), &js); err != nil {
				t.Fatalf("status -o json: %v\n%s%s", err, r.stdout, r.stderr)
			}
			if r.code != 1 || js.EtcdError == "" || !strings.Contains(js.EtcdError, tc.why[1]) {
				t.Errorf("status -o json: exit %d, etcdError %q; want 1 and the reason", r.code, js.EtcdError)
			}
			if js.Spec == nil || js.Spec.MemberCount != 3 || js.Spec.EtcdVersion != v {
				t.Errorf("status -o json: spec %+v, want 3 members at %s", js.Spec, v)
			}
			if js.Versions.Paused == nil || js.Versions.Paused.Reason != "replacing etcd-c's disk" {
				t.Errorf("status -o json: paused %+v", js.Versions.Paused)
			}
			if js.PendingRestore == nil || js.PendingRestore.Backup != latest || js.LastBackup != latest {
				t.Errorf("status -o json: pending restore %+v, last backup %q; want both %s", js.PendingRestore, js.LastBackup, latest)
			}
		})
	}

	// With the cluster's certificate etcd answers: the members and the
	// same store state, exit 0.
	r = etcdadm(append([]string{"status", "--units=false", "--store", url}, tlsArgs(m, pki)...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "1/1 voting members healthy") || strings.Contains(r.stdout, "NOT REACHED") {
		t.Errorf("status with the cluster's certificate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range storeSide {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status with etcd reached does not say %q:\n%s", want, r.stdout)
		}
	}

	r = etcdadm("spec", "show", "--store", url)
	if r.code != 0 || !strings.Contains(r.stdout, "PAUSED") || !strings.Contains(r.stdout, "replacing etcd-c's disk") || !strings.Contains(r.stdout, "etcdadm resume") {
		t.Errorf("spec show on a paused store:\n%s%s", r.stdout, r.stderr)
	}
	r = etcdadm("spec", "show", "--store", url, "-o", "json")
	var sj struct {
		Spec   struct{ MemberCount int32 }
		Paused *struct{ Reason string } `json:"paused"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sj); err != nil || sj.Spec.MemberCount != 3 || sj.Paused == nil || sj.Paused.Reason != "replacing etcd-c's disk" {
		t.Errorf("spec show -o json on a paused store: %v\n%s", err, r.stdout)
	}

	// A recovery and a teardown are the store's too.
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Written directly: a recovery is refused while a restore waits.
	now := time.Now().UTC()
	rec, _ := json.Marshal(recovery.Recover{ID: now.Format("20060102T150405Z"), Member: "etcd-a", At: now, State: recovery.Running})
	if _, err := store.PutBytes(ctxT(t), st, recovery.RecoverKey, rec, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"resume", "--store", url}, {"teardown", "--yes", "--store", url}} {
		if r := etcdadm(args...); r.code != 0 {
			t.Fatalf("etcdadm %v: %+v", args, r)
		}
	}
	noCerts := cases[0]
	r = runBin(t, noCerts.env, "etcdadm", append([]string{"status", "--units=false", "--store", url}, noCerts.args...)...)
	for _, want := range []string{"RECOVERY", "from etcd-a", "TORN DOWN", "seed --force", "etcd: NOT REACHED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status after recover and teardown does not say %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "PAUSED") {
		t.Errorf("status after resume still says paused:\n%s", r.stdout)
	}
	r = runBin(t, noCerts.env, "etcdadm", append([]string{"status", "--units=false", "--store", url, "-o", "json"}, noCerts.args...)...)
	var js storeStatusJSON
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.Recover == nil || js.Recover.Member != "etcd-a" || js.Teardown == nil || js.Versions.Paused != nil {
		t.Errorf("status -o json after recover and teardown: %v %+v\n%s", err, js, r.stdout)
	}
	r = etcdadm("spec", "show", "--store", url)
	if r.code != 0 || strings.Contains(r.stdout, "PAUSED") {
		t.Errorf("spec show after resume:\n%s%s", r.stdout, r.stderr)
	}
}
