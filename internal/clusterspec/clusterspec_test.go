package clusterspec

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

func newStore(t *testing.T) store.Store {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		members int32
		version string
		bad     string
		warn    bool
	}{
		{3, "3.6.16", "", false},
		{1, "3.5.35", "", false},
		{4, "3.7.3", "", true},
		{0, "3.6.16", "memberCount 0", false},
		{9, "3.6.16", "memberCount 9", false},
		{3, "3.9.0", "not supported", false},
		{3, "3.4.26", "not supported", false},
		{3, "v3.6.16", "no leading v", false},
		{3, "latest", "not a version", false},
	} {
		c := Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: tc.members, EtcdVersion: tc.version}}
		c.Defaults()
		w, err := c.Validate()
		if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("%d/%s: err %v, want %q", tc.members, tc.version, err, tc.bad)
		}
		if (len(w) > 0) != tc.warn {
			t.Errorf("%d/%s: warnings %v", tc.members, tc.version, w)
		}
	}
}

func TestSeedAndSet(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if _, err := Load(ctx, st); !errors.Is(err, ErrNotSeeded) {
		t.Fatalf("load of an empty store: %v", err)
	}
	c := Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}, Settings: Settings{ClusterName: "prod"}}
	if err := Seed(ctx, st, c, false); err != nil {
		t.Fatal(err)
	}
	got, err := Load(ctx, st)
	if err != nil || got.Spec != c.Spec || got.Settings.ClientPort != 2379 || !strings.HasPrefix(got.Settings.ClusterToken, "prod-") {
		t.Fatalf("loaded %+v %v", got, err)
	}
	// Same spec again: a no-op, the token stays.
	if err := Seed(ctx, st, c, false); err != nil {
		t.Fatal(err)
	}
	again, _ := Load(ctx, st)
	if again.Settings.ClusterToken != got.Settings.ClusterToken {
		t.Fatal("re-seeding changed the token")
	}
	// A different spec is refused without --force and changes nothing.
	other := Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 5, EtcdVersion: "3.6.16"}, Settings: Settings{ClusterName: "prod"}}
	if err := Seed(ctx, st, other, false); !errors.Is(err, ErrConflict) {
		t.Fatalf("seed over a different spec: %v", err)
	}
	if cur, _ := Load(ctx, st); cur.Spec.MemberCount != 3 {
		t.Fatal("refused seed changed the spec")
	}
	if err := Seed(ctx, st, other, true); err != nil {
		t.Fatal(err)
	}
	if cur, _ := Load(ctx, st); cur.Spec.MemberCount != 5 || cur.Settings.ClusterToken != got.Settings.ClusterToken {
		t.Fatalf("forced seed: %+v", cur)
	}
	// Bad values change nothing.
	if _, _, err := SetSpec(ctx, st, 0, "3.9.1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("set bad version: %v", err)
	}
	if c, w, err := SetSpec(ctx, st, 4, ""); err != nil || len(w) == 0 || c.Spec.MemberCount != 4 {
		t.Fatalf("set 4 members: %+v %v %v", c, w, err)
	}
	// A malformed spec in the store is reported, with a fix that works:
	// the advised command repairs it and keeps the cluster's token.
	before, _ := Load(ctx, st)
	store.PutBytes(ctx, st, etcdmanager.ClusterSpecKey, []byte(`{"memberCount": "three"}`), store.PutOptions{})
	_, err = Load(ctx, st)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "etcdadm seed --force") {
		t.Fatalf("malformed spec: %v", err)
	}
	if _, _, err := SetSpec(ctx, st, 3, ""); err == nil {
		t.Fatal("spec set worked on a malformed spec: then the advice could name it")
	}
	fixed := Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}, Settings: Settings{ClusterName: before.Settings.ClusterName}}
	if err := Seed(ctx, st, fixed, true); err != nil {
		t.Fatalf("the advised repair: %v", err)
	}
	after, err := Load(ctx, st)
	if err != nil || after.Spec.MemberCount != 3 || after.Settings.ClusterToken != before.Settings.ClusterToken {
		t.Fatalf("after the repair: %+v %v (token was %s)", after, err, before.Settings.ClusterToken)
	}
}

// Issue 26 finding 3: a new declaration's cluster name is a DNS label and
// its DNS suffix a DNS name; a store written before these rules loads.
func TestValidateNew(t *testing.T) {
	good := Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: 3, EtcdVersion: "3.6.16"}, Settings: Settings{ClusterName: "prod-eu1", DNSSuffix: "internal.prod.example.com"}}
	if err := good.Defaults(); err != nil {
		t.Fatal(err)
	}
	if _, err := good.ValidateNew(); err != nil {
		t.Fatalf("good: %v", err)
	}
	for _, tc := range []struct {
		name, suffix string
		want         string
	}{
		{"a b/c", "", `cluster name "a b/c"`},
		{"Prod", "", "DNS label"},
		{"etcd_main", "", "DNS label"},
		{"etcd", "has space..x", `dns suffix "has space..x"`},
		{"etcd", "example.com.", "no trailing dot"},
		{"etcd", "-bad.example.com", "a DNS name"},
	} {
		c := good
		c.Settings.ClusterName, c.Settings.DNSSuffix = tc.name, tc.suffix
		_, err := c.ValidateNew()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q suffix %q: %v, want ErrInvalid saying %q", tc.name, tc.suffix, err, tc.want)
		}
		if _, err := c.Validate(); err != nil {
			t.Errorf("name %q suffix %q: Validate (what load uses) refuses it: %v", tc.name, tc.suffix, err)
		}
	}
}
