package pki

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// TestRotationPhases walks a rotation through its phases as three members'
// switchers and the operator would, with the refusals on the way, and
// checks what each phase leaves in the store: who signs, what the bundle
// trusts, and what a client certificate of the old CA verifies against.
func TestRotationPhases(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	old := newCA(t, st)
	oldClient, _, err := old.IssueClient("kube-apiserver", 0)
	if err != nil {
		t.Fatal(err)
	}
	members := []string{"etcd-a", "etcd-b", "etcd-c"}
	now := time.Now()

	if _, err := FinishRotation(ctx, st, now); !errors.Is(err, ErrRotationNotReady) {
		t.Fatalf("finish without a rotation: %v", err)
	}
	r, err := StartRotation(ctx, st, InitOptions{}, now)
	if err != nil || r.Phase != PhaseTrust || r.OldCA != old.Cert.Subject.CommonName || r.NewCA == r.OldCA {
		t.Fatalf("start: %+v %v", r, err)
	}
	ca := loadCA(t, st)
	if len(ca.Bundle) != 2 || !bytes.Equal(ca.Cert.Raw, old.Cert.Raw) {
		t.Fatalf("trust phase: bundle of %d, signer %s; want both CAs, the old one signing", len(ca.Bundle), ca.Cert.Subject)
	}
	oldKey := storeBytes(t, st, CAKeyKey)
	before := storeBytes(t, st, CACertKey)
	if _, err := StartRotation(ctx, st, InitOptions{}, now); !errors.Is(err, ErrRotationActive) {
		t.Fatalf("second start: %v", err)
	}
	if _, err := FinishRotation(ctx, st, now); !errors.Is(err, ErrRotationNotReady) {
		t.Fatalf("finish in the trust phase: %v", err)
	}
	if !bytes.Equal(before, storeBytes(t, st, CACertKey)) {
		t.Fatal("a refused start or finish changed the bundle")
	}

	// Two members restarted: nothing moves; a member that did its part
	// twice counts once.
	for _, m := range []string{"etcd-a", "etcd-b", "etcd-a"} {
		if r, err := DidPart(ctx, st, PhaseTrust, m, members, now); err != nil || r.Phase != PhaseTrust {
			t.Fatalf("%s restarted: %+v %v", m, r, err)
		}
	}
	if rp, err := DidPart(ctx, st, PhaseTrust, "etcd-c", members, now); err != nil || rp.Phase != PhaseTrusted {
		t.Fatalf("last member restarted: %+v %v", rp, err)
	}
	ca = loadCA(t, st)
	if len(ca.Bundle) != 2 || bytes.Equal(ca.Cert.Raw, old.Cert.Raw) || ca.Cert.Subject.CommonName != r.NewCA {
		t.Fatalf("trusted: signer %s; want the new CA %s, both trusted", ca.Cert.Subject, r.NewCA)
	}
	if _, err := st.Stat(ctx, NextKeyKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the next key is still in the store beside ca.key: %v", err)
	}
	if kept := storeBytes(t, st, RetiredKeyKey(r.OldCA)); !bytes.Equal(kept, oldKey) {
		t.Fatal("the old CA key is not kept aside after the new one took over ca.key")
	}
	if ok, err := ca.IssuedPEM(oldClient); err != nil || !ok {
		t.Fatalf("the old client certificate is no longer trusted after the trust phase: %v", err)
	}

	if r, err := FinishRotation(ctx, st, now); err != nil || r.Phase != PhaseReissue {
		t.Fatalf("finish: %+v %v", r, err)
	}
	for _, m := range members {
		rp, err := DidPart(ctx, st, PhaseReissue, m, members, now)
		if err != nil {
			t.Fatal(err)
		}
		r = *rp
	}
	if r.Phase != PhaseDrop {
		t.Fatalf("after every member reissued: %s", r.Phase)
	}
	ca = loadCA(t, st)
	if len(ca.Bundle) != 1 || ca.Cert.Subject.CommonName != r.NewCA {
		t.Fatalf("drop: bundle of %d; want the new CA alone", len(ca.Bundle))
	}
	if ok, _ := ca.IssuedPEM(oldClient); ok {
		t.Fatal("the old client certificate is still trusted after the drop")
	}
	for _, m := range members {
		rp, err := DidPart(ctx, st, PhaseDrop, m, members, now)
		if err != nil {
			t.Fatal(err)
		}
		r = *rp
	}
	if r.Phase != PhaseDone || r.Active() {
		t.Fatalf("after every member restarted without the old CA: %s", r.Phase)
	}
	// A later rotation starts from the new CA.
	if r2, err := StartRotation(ctx, st, InitOptions{}, now); err != nil || r2.OldCA != r.NewCA {
		t.Fatalf("second rotation: %+v %v", r2, err)
	}
}

// TestRotationStartResumes: a start interrupted after storing the new key
// (before the bundle and the record) reuses that key when run again; a
// next key left by an interrupted key swap (it already signs) is replaced.
func TestRotationStartResumes(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	old := newCA(t, st)
	key, err := nextKey(ctx, st, old, keySpec{"ecdsa", 256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartRotation(ctx, st, InitOptions{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	ca := loadCA(t, st)
	if len(ca.Bundle) != 2 || !samePublicKey(ca.Bundle[1].PublicKey, key.Public()) {
		t.Fatal("the resumed start did not use the stored next key")
	}
	// The swap stored ca.key but crashed before deleting the next key.
	kb := storeBytes(t, st, NextKeyKey)
	store.PutBytes(ctx, st, CAKeyKey, kb, store.PutOptions{})
	r, _, _ := LoadRotation(ctx, st)
	r.Phase = PhaseDone
	if _, err := store.PutJSON(ctx, st, RotationKey, r, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := StartRotation(ctx, st, InitOptions{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(storeBytes(t, st, NextKeyKey), kb) {
		t.Fatal("the new rotation reuses the key that already signs")
	}
}

// TestNoRotation: a store that never rotated its CA has no work for the
// switchers (LoadRotation gives nil).
func TestNoRotation(t *testing.T) {
	r, _, err := LoadRotation(context.Background(), newStore(t))
	if err != nil || r != nil || r.Active() || r.MemberWork() {
		t.Fatalf("no rotation: %+v %v", r, err)
	}
}

func loadCA(t *testing.T, st store.Store) *CA {
	t.Helper()
	ca, err := LoadCA(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
