package pki

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// A CA rotation replaces the cluster CA without an outage. The store holds
// its record; the version switcher on each host does the member's part
// (it owns the rolling restart), etcdadm pki rotate-ca starts it and,
// after the operator has given every client a certificate of the new CA,
// finishes it.
//
//	trust     ca.crt = old + new, the old key signs; members restart one
//	          at a time to trust the new CA. When all have: ca.key = the
//	          new key, then
//	trusted   the new CA signs (issue-client gives new certificates and
//	          the two-CA bundle); members keep their old certificates, so
//	          a client that only knows the old CA still verifies them.
//	          The operator reissues every client, then 'rotate-ca --finish':
//	reissue   each member reissues its own certificates from the new CA
//	          (served on the next connection, no restart), then
//	drop      ca.crt = new; members restart one at a time and stop
//	          trusting the old CA: its client certificates stop working.
//	done
const (
	RotationKey = "etcdadm/pki/rotation.json"
	// NextKeyKey holds the new CA's key during the trust phase.
	NextKeyKey = "etcdadm/pki/ca.next.key"
	// retiredKeyPrefix keeps each CA key a rotation replaced, by the CA's
	// common name (which carries its key ID).
	retiredKeyPrefix = "etcdadm/pki/retired/"
)

// Phase of a CA rotation.
type Phase string

// The phases, in order.
const (
	PhaseTrust   Phase = "trust"
	PhaseTrusted Phase = "trusted"
	PhaseReissue Phase = "reissue"
	PhaseDrop    Phase = "drop"
	PhaseDone    Phase = "done"
)

// Rotation is the record of a CA rotation.
type Rotation struct {
	// OldCA and NewCA are the CAs' common names (they carry a key ID).
	OldCA   string    `json:"oldCA"`
	NewCA   string    `json:"newCA"`
	Phase   Phase     `json:"phase"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Done lists, per phase, the members that did their part.
	Done map[Phase][]string `json:"done,omitempty"`
}

// Active: members still have work to do or the operator must finish it.
func (r *Rotation) Active() bool { return r != nil && r.Phase != PhaseDone }

// Restarts: the phase makes members restart (trust and drop).
func (r *Rotation) Restarts() bool { return r.Phase == PhaseTrust || r.Phase == PhaseDrop }

// MemberWork: the phase has a part for every member (false for no
// rotation at all).
func (r *Rotation) MemberWork() bool { return r != nil && (r.Restarts() || r.Phase == PhaseReissue) }

// DidPart reports whether member did its part of the current phase.
func (r *Rotation) DidPart(member string) bool { return slices.Contains(r.Done[r.Phase], member) }

// String is one line for status output.
func (r *Rotation) String() string {
	switch r.Phase {
	case PhaseTrust:
		return fmt.Sprintf("CA rotation %s → %s: members restart to trust the new CA (%d done: %s)", r.OldCA, r.NewCA, len(r.Done[r.Phase]), strings.Join(r.Done[r.Phase], ", "))
	case PhaseTrusted:
		return fmt.Sprintf("CA rotation %s → %s: every member trusts the new CA, which now signs; reissue every client ('etcdadm pki issue-client'), then 'etcdadm pki rotate-ca --finish' (old client certificates stop working then)", r.OldCA, r.NewCA)
	case PhaseReissue:
		return fmt.Sprintf("CA rotation %s → %s: members reissue their certificates from the new CA (%d done: %s)", r.OldCA, r.NewCA, len(r.Done[r.Phase]), strings.Join(r.Done[r.Phase], ", "))
	case PhaseDrop:
		return fmt.Sprintf("CA rotation %s → %s: members restart to stop trusting the old CA (%d done: %s)", r.OldCA, r.NewCA, len(r.Done[r.Phase]), strings.Join(r.Done[r.Phase], ", "))
	}
	return fmt.Sprintf("CA rotation %s → %s done %s", r.OldCA, r.NewCA, r.Updated.UTC().Format(time.RFC3339))
}

// Rotation errors.
var (
	ErrRotationActive   = errors.New("a CA rotation is in progress: 'etcdadm pki rotate-ca' shows how far it is")
	ErrRotationNotReady = errors.New("the CA rotation cannot finish yet")
	ErrRotationConflict = errors.New("the CA rotation record changed meanwhile")
)

// LoadRotation reads the record; nil when no rotation ever ran.
func LoadRotation(ctx context.Context, st store.Store) (*Rotation, string, error) {
	var r Rotation
	etag, err := store.GetJSON(ctx, st, RotationKey, &r)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("pki: %w", err)
	}
	return &r, etag, nil
}

func saveRotation(ctx context.Context, st store.Store, r Rotation, etag string, now time.Time) (string, error) {
	r.Updated = now.UTC()
	tag, err := store.PutJSON(ctx, st, RotationKey, r, store.Since(etag))
	if errors.Is(err, store.ErrPrecondition) {
		return "", fmt.Errorf("pki: %w", ErrRotationConflict)
	}
	if err != nil {
		return "", fmt.Errorf("pki: write %s: %w", RotationKey, err)
	}
	return tag, nil
}

// StartRotation creates the new CA and starts the trust phase. Safe to
// re-run after a crash: the new key is written create-only and reused,
// the bundle gains its certificate once, and the record comes last, so
// no member acts before both are in place.
func StartRotation(ctx context.Context, st store.Store, opts InitOptions, now time.Time) (Rotation, error) {
	if err := opts.Validate(); err != nil {
		return Rotation{}, fmt.Errorf("pki: rotate: %w", err)
	}
	opts.defaults()
	rec, etag, err := LoadRotation(ctx, st)
	if err != nil {
		return Rotation{}, err
	}
	if rec.Active() {
		return *rec, fmt.Errorf("pki: rotate: %w (%s)", ErrRotationActive, rec.Phase)
	}
	ca, err := LoadCA(ctx, st)
	if err != nil {
		return Rotation{}, err
	}
	next, err := nextKey(ctx, st, ca, opts.keySpec())
	if err != nil {
		return Rotation{}, err
	}
	var nextCert []byte
	for _, c := range ca.Bundle {
		if samePublicKey(c.PublicKey, next.Public()) {
			nextCert = c.Raw
		}
	}
	if nextCert == nil {
		if nextCert, err = selfSign(next, opts.Validity, now); err != nil {
			return Rotation{}, fmt.Errorf("pki: rotate: sign the new CA certificate: %w", err)
		}
		if err := putBundle(ctx, st, append(ca.BundlePEM(), encodeCert(nextCert)...)); err != nil {
			return Rotation{}, err
		}
	}
	newCA, err := parseCerts(encodeCert(nextCert))
	if err != nil {
		return Rotation{}, fmt.Errorf("pki: rotate: %w", err)
	}
	r := Rotation{OldCA: ca.Cert.Subject.CommonName, NewCA: newCA[0].Subject.CommonName, Phase: PhaseTrust, Started: now.UTC()}
	if _, err := saveRotation(ctx, st, r, etag, now); err != nil {
		return Rotation{}, err
	}
	return r, nil
}

// nextKey is the stored next key, or a new one. A next key that already
// signs (left by a rotation interrupted after its key swap) is replaced.
func nextKey(ctx context.Context, st store.Store, ca *CA, spec keySpec) (crypto.Signer, error) {
	k, err := storedKeyAt(ctx, st, NextKeyKey)
	switch {
	case err == nil && !samePublicKey(k.Public(), ca.key.Public()):
		return k, nil
	case err == nil:
		if err := st.Delete(ctx, NextKeyKey); err != nil {
			return nil, fmt.Errorf("pki: delete %s: %w", NextKeyKey, err)
		}
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	return createKey(ctx, st, NextKeyKey, spec)
}

func putBundle(ctx context.Context, st store.Store, pem []byte) error {
	if _, err := store.PutBytes(ctx, st, CACertKey, pem, store.PutOptions{}); err != nil {
		return fmt.Errorf("pki: rotate: write %s: %w", CACertKey, err)
	}
	return nil
}

// FinishRotation starts the last phases once every member trusts the new
// CA and the new CA signs: members reissue their certificates, then stop
// trusting the old CA.
func FinishRotation(ctx context.Context, st store.Store, now time.Time) (Rotation, error) {
	rec, etag, err := LoadRotation(ctx, st)
	if err != nil {
		return Rotation{}, err
	}
	switch {
	case rec == nil || rec.Phase == PhaseDone:
		return Rotation{}, fmt.Errorf("pki: rotate: %w: no CA rotation in progress (start one with 'etcdadm pki rotate-ca')", ErrRotationNotReady)
	case rec.Phase == PhaseTrust:
		return *rec, fmt.Errorf("pki: rotate: %w: members still restart to trust the new CA (%d done: %s); run --finish when 'etcdadm pki rotate-ca' says every member trusts it", ErrRotationNotReady, len(rec.Done[PhaseTrust]), strings.Join(rec.Done[PhaseTrust], ", "))
	case rec.Phase != PhaseTrusted:
		return *rec, nil // already finishing
	}
	rec.Phase = PhaseReissue
	if _, err := saveRotation(ctx, st, *rec, etag, now); err != nil {
		return Rotation{}, err
	}
	return *rec, nil
}

// DidPart records that member did its part of phase. When every one of
// members has, the rotation moves on. It returns the record as written.
func DidPart(ctx context.Context, st store.Store, phase Phase, member string, members []string, now time.Time) (*Rotation, error) {
	for range 10 {
		rec, etag, err := LoadRotation(ctx, st)
		if err != nil || rec == nil || rec.Phase != phase {
			return rec, err
		}
		if !rec.DidPart(member) {
			if rec.Done == nil {
				rec.Done = map[Phase][]string{}
			}
			rec.Done[phase] = append(rec.Done[phase], member)
			slices.Sort(rec.Done[phase])
		}
		if all(rec.Done[phase], members) {
			if err := advance(ctx, st, rec); err != nil {
				return nil, err
			}
		}
		_, err = saveRotation(ctx, st, *rec, etag, now)
		if errors.Is(err, ErrRotationConflict) {
			continue
		}
		return rec, err
	}
	return nil, fmt.Errorf("pki: rotate: %w ten times in a row", ErrRotationConflict)
}

func all(done, members []string) bool {
	for _, m := range members {
		if !slices.Contains(done, m) {
			return false
		}
	}
	return len(members) > 0
}

// RetiredKeyKey is where a rotation keeps the key of the CA named cn.
func RetiredKeyKey(cn string) string {
	return retiredKeyPrefix + strings.NewReplacer("/", "_", " ", "_").Replace(cn) + ".key"
}

// advance does what ends rec's phase in the store and moves rec on. Each
// write is idempotent, so a crash before the record is saved repeats it.
func advance(ctx context.Context, st store.Store, rec *Rotation) error {
	switch rec.Phase {
	case PhaseTrust:
		// The new key signs from now on. The old key is gone from the
		// store: what it signed stays trusted until the drop phase.
		b, _, err := store.GetBytes(ctx, st, NextKeyKey, maxObject)
		if errors.Is(err, store.ErrNotFound) {
			// Swapped before a crash: ca.key holds it already.
			rec.Phase = PhaseTrusted
			return nil
		}
		if err != nil {
			return fmt.Errorf("pki: rotate: read %s: %w", NextKeyKey, err)
		}
		// The old key is kept aside first (never deleted): what it signed
		// can be inspected, and a rotation gone wrong undone by hand.
		old, _, err := store.GetBytes(ctx, st, CAKeyKey, maxObject)
		if err != nil {
			return fmt.Errorf("pki: rotate: read %s: %w", CAKeyKey, err)
		}
		if _, err := store.PutBytes(ctx, st, RetiredKeyKey(rec.OldCA), old, store.PutOptions{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrPrecondition) {
			return fmt.Errorf("pki: rotate: keep the old key as %s: %w", RetiredKeyKey(rec.OldCA), err)
		}
		if _, err := store.PutBytes(ctx, st, CAKeyKey, b, store.PutOptions{}); err != nil {
			return fmt.Errorf("pki: rotate: write %s: %w", CAKeyKey, err)
		}
		if err := st.Delete(ctx, NextKeyKey); err != nil {
			return fmt.Errorf("pki: rotate: delete %s: %w", NextKeyKey, err)
		}
		rec.Phase = PhaseTrusted
	case PhaseReissue:
		ca, err := LoadCA(ctx, st)
		if err != nil {
			return err
		}
		if only := encodeCert(ca.Cert.Raw); !bytes.Equal(ca.BundlePEM(), only) {
			if err := putBundle(ctx, st, only); err != nil {
				return err
			}
		}
		rec.Phase = PhaseDrop
	case PhaseDrop:
		rec.Phase = PhaseDone
	}
	return nil
}
