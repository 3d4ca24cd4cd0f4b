package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestLockHeldGivesUpWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	holder, waiter := open(t, path), open(t, path) // two opens: two flock owners
	if err := Lock(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Lock(ctx, waiter)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock held elsewhere, context ended: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %s, want about 200ms", d)
	}

	// Once the holder lets go, the waiter gets the lock.
	done := make(chan error, 1)
	go func() { done <- Lock(t.Context(), waiter) }()
	if err := Unlock(holder); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the released lock")
	}
}

func TestLockCanceled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	holder, waiter := open(t, path), open(t, path)
	if err := Lock(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Lock(ctx, waiter); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v, want context.Canceled", err)
	}
}
