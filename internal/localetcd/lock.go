// Package localetcd owns what only one program at a time may do to this
// host's etcd: start, restart or stop it, and change what it runs (its
// environment file, its binary). Member join, the version switcher and
// manual mode each hold the host lock while they do; the service they
// are given refuses to start or stop etcd without it, so two of our
// programs never act on one etcd at once (a switcher's rollback
// restarting etcd under a restore that just moved its data aside).
package localetcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/filelock"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
)

// LockFile is the host lock, under the host's root prefix.
const LockFile = "run/etcdadm/local-etcd.lock"

// ErrNotHeld: a start or stop of etcd by a program that does not hold
// the host lock (a bug of ours: it is refused, never done).
var ErrNotHeld = errors.New("this host's etcd lock is not held")

// Lock is this process's handle on the host lock.
type Lock struct {
	path string

	mu sync.Mutex
	f  *os.File
}

// New is the host lock of the host at root ("" or "/" on a real host).
func New(root string) *Lock {
	return &Lock{path: filepath.Join(root, LockFile)}
}

// Acquire takes the host lock for holder (the program and what it does,
// shown to anyone who waits), waiting until ctx ends; the error then says
// who holds it. release gives it back.
func (l *Lock) Acquire(ctx context.Context, holder string) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return nil, fmt.Errorf("host lock: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host lock: %w", err)
	}
	if err := filelock.Lock(ctx, f); err != nil {
		who, _ := os.ReadFile(l.path)
		f.Close()
		return nil, fmt.Errorf("this host's etcd is busy: %s: %w", orUnknown(string(who)), err)
	}
	note := fmt.Sprintf("%s (pid %d) since %s\n", holder, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(note), 0)
	}
	l.mu.Lock()
	l.f = f
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.f = nil
		l.mu.Unlock()
		f.Truncate(0)
		filelock.Unlock(f)
		f.Close()
	}, nil
}

func orUnknown(who string) string {
	if who = strings.TrimSpace(who); who == "" {
		return "another program holds it"
	}
	return who + " holds it"
}

// Held reports whether this process holds the host lock now.
func (l *Lock) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f != nil
}

// Guard is m refusing to start or stop etcd unless l is held.
func (l *Lock) Guard(m service.Manager) service.Manager { return guarded{m, l} }

type guarded struct {
	service.Manager
	l *Lock
}

func (g guarded) Start(ctx context.Context, restart bool) error {
	if !g.l.Held() {
		return fmt.Errorf("start etcd: %w", ErrNotHeld)
	}
	return g.Manager.Start(ctx, restart)
}

func (g guarded) Stop(ctx context.Context) error {
	if !g.l.Held() {
		return fmt.Errorf("stop etcd: %w", ErrNotHeld)
	}
	return g.Manager.Stop(ctx)
}

// Hold takes the host lock of the host at root for holder, waiting until
// ctx ends, and returns svc guarded by it: the whole run of a program
// that acts on this host's etcd.
func Hold(ctx context.Context, root, holder string, svc service.Manager) (guarded service.Manager, release func(), err error) {
	l := New(root)
	release, err = l.Acquire(ctx, holder)
	if err != nil {
		return nil, nil, err
	}
	return l.Guard(svc), release, nil
}
