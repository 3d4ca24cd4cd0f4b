// Package storetest is the conformance suite every store.Store backend
// passes: each backend's tests call Run with a function that opens an empty
// store. Only tests import it.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// opTimeout bounds every subtest's store calls.
const opTimeout = 2 * time.Minute

// Run runs the suite. open must return an empty store that no other
// subtest uses; it is called once per subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, s store.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"BadKeys", testBadKeys},
		{"List", testList},
		{"InFlightPutInvisible", testInFlightPutInvisible},
		{"CreateOnly", testCreateOnly},
		{"CompareAndSwap", testCompareAndSwap},
		{"CreateOnlyRace", testCreateOnlyRace},
		{"LargeStreamed", testLargeStreamed},
		{"FailedPut", testFailedPut},
		{"FailedOverwriteKeepsOld", testFailedOverwriteKeepsOld},
		{"ConditionalTooLarge", testConditionalTooLarge},
		{"CleanIncomplete", testCleanIncomplete},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
			defer cancel()
			tc.fn(t, ctx, s)
		})
	}
}

func testRoundTrip(t *testing.T, ctx context.Context, s store.Store) {
	if s.String() == "" {
		t.Errorf("String() is empty")
	}
	body := []byte("snapshot bytes\x00\xff")
	put := mustPut(t, ctx, s, "a/b/obj", body, store.PutOptions{})
	if put.Key != "a/b/obj" || put.Size != int64(len(body)) || put.ETag == "" {
		t.Errorf("Put = %+v, want key a/b/obj, size %d and an ETag", put, len(body))
	}
	st, err := s.Stat(ctx, "a/b/obj")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if st.Key != "a/b/obj" || st.Size != put.Size || st.ETag != put.ETag || st.Modified.IsZero() {
		t.Errorf("Stat = %+v, want key, size and ETag of Put %+v and a modification time", st, put)
	}
	got, gi := mustGet(t, ctx, s, "a/b/obj")
	if !bytes.Equal(got, body) {
		t.Errorf("Get = %q, want %q", got, body)
	}
	if gi.Size != put.Size || gi.ETag != put.ETag {
		t.Errorf("Get info = %+v, want size and ETag of Put %+v", gi, put)
	}
	// An empty object is an object.
	mustPut(t, ctx, s, "empty", nil, store.PutOptions{})
	if got, _ := mustGet(t, ctx, s, "empty"); len(got) != 0 {
		t.Errorf("Get empty = %q, want nothing", got)
	}
}

func testOverwrite(t *testing.T, ctx context.Context, s store.Store) {
	first := mustPut(t, ctx, s, "k", []byte("first version"), store.PutOptions{})
	second := mustPut(t, ctx, s, "k", []byte("v2"), store.PutOptions{})
	if second.ETag == first.ETag {
		t.Errorf("overwrite kept ETag %q", first.ETag)
	}
	got, info := mustGet(t, ctx, s, "k")
	if string(got) != "v2" || info.Size != 2 || info.ETag != second.ETag {
		t.Errorf("after overwrite Get = %q %+v, want v2, size 2, ETag %q", got, info, second.ETag)
	}
}

func testMissing(t *testing.T, ctx context.Context, s store.Store) {
	if rc, _, err := s.Get(ctx, "no/such"); !errors.Is(err, store.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("Get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "no/such"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat missing: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "no/such"); err != nil {
		t.Errorf("Delete missing: %v, want nil", err)
	}
	// A prefix of a key is not a key.
	mustPut(t, ctx, s, "dir/obj", []byte("x"), store.PutOptions{})
	if _, err := s.Stat(ctx, "dir"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat of a directory: %v, want ErrNotFound", err)
	}
	if entries := mustList(t, ctx, s, "nothing/here/"); len(entries) != 0 {
		t.Errorf("List of a missing prefix = %v, want nothing", entries)
	}
	// Below an object's name there is nothing.
	if entries := mustList(t, ctx, s, "dir/obj/"); len(entries) != 0 {
		t.Errorf("List below an object = %v, want nothing", entries)
	}
}

func testDelete(t *testing.T, ctx context.Context, s store.Store) {
	mustPut(t, ctx, s, "d/one/obj", []byte("x"), store.PutOptions{})
	mustPut(t, ctx, s, "d/two", []byte("y"), store.PutOptions{})
	if err := s.Delete(ctx, "d/one/obj"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Stat(ctx, "d/one/obj"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat after Delete: %v, want ErrNotFound", err)
	}
	// Like S3, no empty "directory" is left behind.
	assertList(t, ctx, s, "d/", []store.Entry{{Name: "two"}})
	if err := s.Delete(ctx, "d/one/obj"); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
}

func testBadKeys(t *testing.T, ctx context.Context, s store.Store) {
	for _, key := range []string{"", "../x", "/x", "a//b", "x/", "./x", "a/../b", "a/./b", ".."} {
		if _, err := s.Put(ctx, key, bytes.NewReader([]byte("x")), store.PutOptions{}); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Put %q: %v, want ErrBadKey", key, err)
		}
		if _, err := s.Put(ctx, key, bytes.NewReader([]byte("x")), store.PutOptions{IfNoneMatch: true}); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Put create-only %q: %v, want ErrBadKey", key, err)
		}
		if rc, _, err := s.Get(ctx, key); !errors.Is(err, store.ErrBadKey) {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("Get %q: %v, want ErrBadKey", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Stat %q: %v, want ErrBadKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("Delete %q: %v, want ErrBadKey", key, err)
		}
	}
	for _, prefix := range []string{"a", "/a/", "../", "a//", "./"} {
		if _, err := s.List(ctx, prefix); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("List %q: %v, want ErrBadKey", prefix, err)
		}
		if _, err := s.CleanIncomplete(ctx, prefix, 0); !errors.Is(err, store.ErrBadKey) {
			t.Errorf("CleanIncomplete %q: %v, want ErrBadKey", prefix, err)
		}
	}
	// Nothing was written by any of it.
	assertList(t, ctx, s, "", nil)
}

func testList(t *testing.T, ctx context.Context, s store.Store) {
	for _, key := range []string{"z", "b/d/e", "a", "c/f", "b/c", "b/d/g/h", "a.txt"} {
		mustPut(t, ctx, s, key, []byte(key), store.PutOptions{})
	}
	assertList(t, ctx, s, "", []store.Entry{
		{Name: "a"}, {Name: "a.txt"}, {Name: "b", Dir: true}, {Name: "c", Dir: true}, {Name: "z"},
	})
	assertList(t, ctx, s, "b/", []store.Entry{{Name: "c"}, {Name: "d", Dir: true}})
	assertList(t, ctx, s, "b/d/", []store.Entry{{Name: "e"}, {Name: "g", Dir: true}})
	assertList(t, ctx, s, "b/d/g/", []store.Entry{{Name: "h"}})
	assertList(t, ctx, s, "c/", []store.Entry{{Name: "f"}})
}

// testInFlightPutInvisible holds a Put open after more than one S3 part has
// been read and checks that nothing of it is visible until it completes.
func testInFlightPutInvisible(t *testing.T, ctx context.Context, s store.Store) {
	mustPut(t, ctx, s, "up/other", []byte("x"), store.PutOptions{})
	pr, pw := io.Pipe()
	type result struct {
		info store.Info
		err  error
	}
	done := make(chan result, 1)
	t.Cleanup(func() { pw.CloseWithError(errors.New("test ended")) })
	go func() {
		info, err := s.Put(ctx, "up/obj", pr, store.PutOptions{})
		pr.CloseWithError(err) // unblocks the writer below if Put gave up
		done <- result{info, err}
	}()
	const size = 9 << 20
	// Write returns once Put has consumed all of it.
	if _, err := pw.Write(make([]byte, size)); err != nil {
		t.Fatalf("feed the put: %v (put: %v)", err, (<-done).err)
	}
	if _, err := s.Stat(ctx, "up/obj"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat during Put: %v, want ErrNotFound", err)
	}
	assertList(t, ctx, s, "up/", []store.Entry{{Name: "other"}})
	if err := pw.Close(); err != nil {
		t.Fatalf("close the pipe: %v", err)
	}
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatalf("Put did not finish: %v", ctx.Err())
	}
	if res.err != nil {
		t.Fatalf("Put: %v", res.err)
	}
	if res.info.Size != size {
		t.Errorf("Put size = %d, want %d", res.info.Size, size)
	}
	assertList(t, ctx, s, "up/", []store.Entry{{Name: "obj"}, {Name: "other"}})
}

func testCreateOnly(t *testing.T, ctx context.Context, s store.Store) {
	create := store.PutOptions{IfNoneMatch: true}
	first := mustPut(t, ctx, s, "lock", []byte("mine"), create)
	if _, err := store.PutBytes(ctx, s, "lock", []byte("theirs"), create); !errors.Is(err, store.ErrPrecondition) {
		t.Fatalf("second create-only Put: %v, want ErrPrecondition", err)
	}
	got, info := mustGet(t, ctx, s, "lock")
	if string(got) != "mine" || info.ETag != first.ETag {
		t.Errorf("after refused create Get = %q (ETag %q), want mine (ETag %q)", got, info.ETag, first.ETag)
	}
	// Once deleted, the key can be created again.
	if err := s.Delete(ctx, "lock"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	mustPut(t, ctx, s, "lock", []byte("again"), create)
}

func testCompareAndSwap(t *testing.T, ctx context.Context, s store.Store) {
	v1 := mustPut(t, ctx, s, "state", []byte("v1"), store.PutOptions{})
	v2, err := store.PutBytes(ctx, s, "state", []byte("v2"), store.PutOptions{IfMatch: v1.ETag})
	if err != nil {
		t.Fatalf("Put IfMatch current ETag: %v", err)
	}
	if v2.ETag == "" || v2.ETag == v1.ETag {
		t.Errorf("swap returned ETag %q, want a new one (old %q)", v2.ETag, v1.ETag)
	}
	if st, err := s.Stat(ctx, "state"); err != nil || st.ETag != v2.ETag {
		t.Errorf("Stat after swap = %+v, %v; want ETag %q", st, err, v2.ETag)
	}
	if _, err := store.PutBytes(ctx, s, "state", []byte("stale"), store.PutOptions{IfMatch: v1.ETag}); !errors.Is(err, store.ErrPrecondition) {
		t.Errorf("Put IfMatch stale ETag: %v, want ErrPrecondition", err)
	}
	if got, info := mustGet(t, ctx, s, "state"); string(got) != "v2" || info.ETag != v2.ETag {
		t.Errorf("after stale swap Get = %q (ETag %q), want v2 (ETag %q)", got, info.ETag, v2.ETag)
	}
	// The returned ETag is good for the next swap.
	v3, err := store.PutBytes(ctx, s, "state", []byte("v3"), store.PutOptions{IfMatch: v2.ETag})
	if err != nil {
		t.Fatalf("Put IfMatch returned ETag: %v", err)
	}
	if got, _ := mustGet(t, ctx, s, "state"); string(got) != "v3" {
		t.Errorf("after second swap Get = %q, want v3", got)
	}
	if _, err := store.PutBytes(ctx, s, "missing", []byte("x"), store.PutOptions{IfMatch: v3.ETag}); !errors.Is(err, store.ErrPrecondition) {
		t.Errorf("Put IfMatch on a missing key: %v, want ErrPrecondition", err)
	}
	if _, err := s.Stat(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat after refused swap: %v, want ErrNotFound", err)
	}
}

func testCreateOnlyRace(t *testing.T, ctx context.Context, s store.Store) {
	const writers, rounds = 10, 20
	for round := range rounds {
		key := fmt.Sprintf("race/%02d", round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			winners []int
			etags   = map[int]string{}
		)
		for w := range writers {
			wg.Go(func() {
				<-start
				info, err := store.PutBytes(ctx, s, key, []byte(fmt.Sprintf("writer %d", w)), store.PutOptions{IfNoneMatch: true})
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, w)
					etags[w] = info.ETag
					mu.Unlock()
				case !errors.Is(err, store.ErrPrecondition):
					t.Errorf("round %d writer %d: %v, want success or ErrPrecondition", round, w, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: writers %v all created %s, want exactly one", round, winners, key)
		}
		got, info := mustGet(t, ctx, s, key)
		if want := fmt.Sprintf("writer %d", winners[0]); string(got) != want || info.ETag != etags[winners[0]] {
			t.Fatalf("round %d: %s holds %q (ETag %q), want the winner's %q (ETag %q)", round, key, got, info.ETag, want, etags[winners[0]])
		}
	}
}

func testLargeStreamed(t *testing.T, ctx context.Context, s store.Store) {
	const size = 40 << 20
	src := newGenReader(size, 1)
	info, err := s.Put(ctx, "big/snapshot.db", src, store.PutOptions{})
	if err != nil {
		t.Fatalf("Put %d bytes: %v", size, err)
	}
	if info.Size != size {
		t.Errorf("Put size = %d, want %d", info.Size, size)
	}
	want := src.sum()
	rc, gi, err := s.Get(ctx, "big/snapshot.db")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if n != size || gi.Size != size || !bytes.Equal(h.Sum(nil), want) {
		t.Errorf("read back %d bytes (Info.Size %d) with sha256 %x, want %d bytes with %x", n, gi.Size, h.Sum(nil), size, want)
	}
	if st, err := s.Stat(ctx, "big/snapshot.db"); err != nil || st.ETag != info.ETag || st.Size != size {
		t.Errorf("Stat = %+v, %v; want size %d and ETag %q", st, err, size, info.ETag)
	}
}

// errReader is what a failing source returns.
var errReader = errors.New("storetest: source failed")

func testFailedPut(t *testing.T, ctx context.Context, s store.Store) {
	// Small (one S3 part) and large (fails after more than one part).
	for _, after := range []int64{100 << 10, 20 << 20} {
		key := fmt.Sprintf("failed/at-%d", after)
		_, err := s.Put(ctx, key, newGenReader(after+1<<20, 2).failAfter(after), store.PutOptions{})
		if !errors.Is(err, errReader) {
			t.Errorf("Put from a reader failing after %d bytes: %v, want the reader's error", after, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Stat after failed Put: %v, want ErrNotFound", err)
		}
	}
	assertList(t, ctx, s, "", nil)
	if _, err := s.CleanIncomplete(ctx, "", 0); err != nil {
		t.Errorf("CleanIncomplete: %v", err)
	}
	assertList(t, ctx, s, "", nil)
}

func testFailedOverwriteKeepsOld(t *testing.T, ctx context.Context, s store.Store) {
	old := mustPut(t, ctx, s, "keep", []byte("old content"), store.PutOptions{})
	_, err := s.Put(ctx, "keep", newGenReader(30<<20, 3).failAfter(17<<20), store.PutOptions{})
	if !errors.Is(err, errReader) {
		t.Errorf("failing overwrite: %v, want the reader's error", err)
	}
	got, info := mustGet(t, ctx, s, "keep")
	if string(got) != "old content" || info.ETag != old.ETag {
		t.Errorf("after failed overwrite Get = %q (ETag %q), want the old content (ETag %q)", got, info.ETag, old.ETag)
	}
	assertList(t, ctx, s, "", []store.Entry{{Name: "keep"}})
}

func testConditionalTooLarge(t *testing.T, ctx context.Context, s store.Store) {
	big := newGenReader(store.SmallObjectLimit+1, 4)
	if _, err := s.Put(ctx, "too-big", big, store.PutOptions{IfNoneMatch: true}); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("create-only Put of %d bytes: %v, want ErrTooLarge", store.SmallObjectLimit+1, err)
	}
	if _, err := s.Stat(ctx, "too-big"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat after refused Put: %v, want ErrNotFound", err)
	}
	cur := mustPut(t, ctx, s, "small", []byte("small"), store.PutOptions{})
	big = newGenReader(store.SmallObjectLimit+1, 5)
	if _, err := s.Put(ctx, "small", big, store.PutOptions{IfMatch: cur.ETag}); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("compare-and-swap Put of %d bytes: %v, want ErrTooLarge", store.SmallObjectLimit+1, err)
	}
	if got, _ := mustGet(t, ctx, s, "small"); string(got) != "small" {
		t.Errorf("after refused swap Get = %q, want small", got)
	}
	// The limit itself is allowed.
	limit := newGenReader(store.SmallObjectLimit, 6)
	info, err := s.Put(ctx, "at-limit", limit, store.PutOptions{IfNoneMatch: true})
	if err != nil || info.Size != store.SmallObjectLimit {
		t.Errorf("create-only Put of exactly SmallObjectLimit: %+v, %v; want success", info, err)
	}
}

func testCleanIncomplete(t *testing.T, ctx context.Context, s store.Store) {
	if n, err := s.CleanIncomplete(ctx, "", 0); err != nil || n != 0 {
		t.Errorf("CleanIncomplete of an empty store = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.CleanIncomplete(ctx, "no/such/", 0); err != nil || n != 0 {
		t.Errorf("CleanIncomplete of a missing prefix = %d, %v; want 0, nil", n, err)
	}
	mustPut(t, ctx, s, "x/done", []byte("complete"), store.PutOptions{})
	if _, err := s.CleanIncomplete(ctx, "", 0); err != nil {
		t.Errorf("CleanIncomplete: %v", err)
	}
	if got, _ := mustGet(t, ctx, s, "x/done"); string(got) != "complete" {
		t.Errorf("CleanIncomplete touched a complete object: %q", got)
	}
}

func mustPut(t *testing.T, ctx context.Context, s store.Store, key string, b []byte, opts store.PutOptions) store.Info {
	t.Helper()
	info, err := store.PutBytes(ctx, s, key, b, opts)
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return info
}

func mustGet(t *testing.T, ctx context.Context, s store.Store, key string) ([]byte, store.Info) {
	t.Helper()
	b, info, err := store.GetBytes(ctx, s, key, 64<<20)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	return b, info
}

func mustList(t *testing.T, ctx context.Context, s store.Store, prefix string) []store.Entry {
	t.Helper()
	entries, err := s.List(ctx, prefix)
	if err != nil {
		t.Fatalf("List %q: %v", prefix, err)
	}
	return entries
}

func assertList(t *testing.T, ctx context.Context, s store.Store, prefix string, want []store.Entry) {
	t.Helper()
	got := mustList(t, ctx, s, prefix)
	if !slices.Equal(got, want) {
		t.Errorf("List %q = %v, want %v", prefix, got, want)
	}
}

// genReader produces size pseudo-random bytes without holding them, and
// hashes what it produced.
type genReader struct {
	rng    *rand.ChaCha8
	left   int64
	failAt int64 // -1: never
	read   int64
	h      hash.Hash
}

func newGenReader(size int64, seed byte) *genReader {
	var s [32]byte
	s[0] = seed
	return &genReader{rng: rand.NewChaCha8(s), left: size, failAt: -1, h: sha256.New()}
}

// failAfter makes the reader return errReader once it produced n bytes.
func (g *genReader) failAfter(n int64) *genReader { g.failAt = n; return g }

func (g *genReader) Read(p []byte) (int, error) {
	if g.failAt >= 0 && g.read >= g.failAt {
		return 0, errReader
	}
	if g.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	n = min(n, g.left)
	if g.failAt >= 0 {
		n = min(n, g.failAt-g.read)
	}
	g.rng.Read(p[:n])
	g.h.Write(p[:n])
	g.left -= n
	g.read += n
	return int(n), nil
}

func (g *genReader) sum() []byte { return g.h.Sum(nil) }
