package localetcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeService records what it was asked to do (a unit test of the guard).
type fakeService struct{ starts, stops int }

func (f *fakeService) Start(context.Context, bool) error    { f.starts++; return nil }
func (f *fakeService) Stop(context.Context) error           { f.stops++; return nil }
func (f *fakeService) Active(context.Context) (bool, error) { return true, nil }

func TestGuardRefusesWithoutTheLock(t *testing.T) {
	root := t.TempDir()
	l := New(root)
	svc := &fakeService{}
	g := l.Guard(svc)
	if err := g.Start(t.Context(), true); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("start without the lock: %v", err)
	}
	if err := g.Stop(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stop without the lock: %v", err)
	}
	release, err := l.Acquire(t.Context(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	release()
	if svc.starts != 1 || svc.stops != 1 {
		t.Fatalf("etcd started %d and stopped %d times, want once each (with the lock only)", svc.starts, svc.stops)
	}
	if err := g.Stop(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stop after release: %v", err)
	}
}

func TestSecondHolderWaitsAndIsTold(t *testing.T) {
	root := t.TempDir()
	release, err := New(root).Acquire(t.Context(), "etcd-member-join: restore")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := New(root).Acquire(ctx, "etcd-version-switcher"); err == nil || !strings.Contains(err.Error(), "etcd-member-join: restore (pid") {
		t.Fatalf("second holder: %v, want busy naming the holder", err)
	}
	release()
	again, err := New(root).Acquire(t.Context(), "etcd-version-switcher")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}
