// Package filelock takes exclusive flock(2) locks that give up when a
// context ends: a blocking flock waits for as long as the holder keeps
// the lock, and on an NFS store a hung client can keep it for minutes.
// Used by filestore (the compare-and-swap lock), pki (certificate
// directories) and dns (the in-place hosts file write).
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Polling bounds: the first retry comes soon, so an uncontended lock
// costs nothing, and the longest pause stays short against the lease and
// timer intervals of the callers.
const (
	firstWait = time.Millisecond
	maxWait   = 100 * time.Millisecond
)

// Lock takes an exclusive flock on f, trying without blocking and again
// after a pause that doubles up to maxWait, until ctx is done. The error
// then wraps ctx.Err(). Unlock releases it (closing f does too).
func Lock(ctx context.Context, f *os.File) error {
	start := time.Now()
	for wait := firstWait; ; wait = min(2*wait, maxWait) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lock %s: held by another process for %s: %w", f.Name(), time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-t.C:
		}
	}
}

// Unlock releases the lock Lock took on f.
func Unlock(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		return fmt.Errorf("unlock %s: %w", f.Name(), err)
	}
	return nil
}
