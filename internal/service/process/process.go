// Package process is the service.Manager that runs etcd as a child
// process: for tests and the local demo, where there is no systemd. It
// reads the same environment file the etcd unit uses.
package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/internal/service"
)

var _ service.Manager = (*Runner)(nil)

// Runner runs one etcd.
type Runner struct {
	EtcdBin string
	EnvFile string
	LogFile string
	// OnceEnvFile, when set, is read after EnvFile and removed once etcd
	// started, as etcd.service does with /run/etcdadm/etcd-once.env.
	OnceEnvFile string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts etcd with the environment file's variables.
func (r *Runner) Start(ctx context.Context, restart bool) error {
	r.mu.Lock()
	running := r.cmd != nil && !isDone(r.done)
	r.mu.Unlock()
	if running && !restart {
		return nil
	}
	if running {
		if err := r.Stop(ctx); err != nil {
			return err
		}
	}
	vars, err := envfile.Read(r.EnvFile)
	if err != nil {
		return fmt.Errorf("process: %w", err)
	}
	once := map[string]string{}
	if r.OnceEnvFile != "" {
		if once, err = envfile.Read(r.OnceEnvFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("process: %w", err)
		}
		maps.Copy(vars, once)
	}
	env := []string{"PATH=/usr/bin:/bin"}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	log, err := os.OpenFile(r.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("process: %w", err)
	}
	cmd := exec.Command(r.EtcdBin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("process: start %s: %w", r.EtcdBin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	if len(once) > 0 {
		os.Remove(r.OnceEnvFile)
	}
	return nil
}

// Stop sends SIGTERM and waits (up to 30 s, then SIGKILL).
func (r *Runner) Stop(ctx context.Context) error { return r.signal(ctx, syscall.SIGTERM) }

// Kill ends etcd at once, like a power failure (tests).
func (r *Runner) Kill(ctx context.Context) error { return r.signal(ctx, syscall.SIGKILL) }

func (r *Runner) signal(ctx context.Context, sig syscall.Signal) error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil || isDone(done) {
		return nil
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
	}
	return nil
}

// Active reports whether the child is running.
func (r *Runner) Active(context.Context) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil && !isDone(r.done), nil
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
