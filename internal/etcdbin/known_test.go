package etcdbin

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// Issue 26 finding 3: a cluster is declared at a release this build knows,
// or one pushed into the store; 3.6.999 is neither.
func TestKnown(t *testing.T) {
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := Releases{Store: st}
	if err := r.Known(t.Context(), etcdversion.MustParse("3.6.16")); err != nil {
		t.Errorf("3.6.16: %v", err)
	}
	err = r.Known(t.Context(), etcdversion.MustParse("3.6.999"))
	if !errors.Is(err, etcdversion.ErrUnreleased) || !strings.Contains(err.Error(), "release push 3.6.999") {
		t.Errorf("3.6.999: %v", err)
	}
	v := etcdversion.MustParse("3.6.17")
	if _, err := store.PutBytes(t.Context(), st, manifestKey(v), []byte("{}"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Known(t.Context(), v); err != nil {
		t.Errorf("3.6.17 pushed: %v", err)
	}
	if err := r.Known(t.Context(), etcdversion.MustParse("3.9.1")); !errors.Is(err, etcdversion.ErrUnsupported) {
		t.Errorf("3.9.1: %v", err)
	}
}
