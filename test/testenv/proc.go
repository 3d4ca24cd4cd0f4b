package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopTimeout bounds how long a process may take to exit after SIGTERM
// before it is killed, and how long a killed process may take to go away.
const stopTimeout = 10 * time.Second

// proc is one child process whose output goes to a log file.
type proc struct {
	name    string // for messages
	logFile string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once Wait returned
	mu      sync.Mutex
	waitErr error
}

// startProc runs bin with args and env (of the test's environment only
// PATH is passed on), appending its output to logFile. The process is stopped in
// cleanup, and on test failure the tail of its log is printed.
func startProc(t testing.TB, name, logFile string, env []string, bin string, args ...string) *proc {
	t.Helper()
	lf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("testenv: %s: open log: %v", name, err)
	}
	defer lf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	p := &proc{name: name, logFile: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: last lines of %s (%s):\n%s", name, logFile, tail(logFile, 30))
		}
	})
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return p
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to stopTimeout, then kills. Stopping an
// exited process is a no-op.
func (p *proc) stop() error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	return p.kill()
}

// kill sends SIGKILL and waits (bounded) for the process to go away.
func (p *proc) kill() error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("%s (pid %d) still running %s after SIGKILL", p.name, p.cmd.Process.Pid, stopTimeout)
	}
}

// exitErr is how the process ended, once it has.
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// tail returns the last n lines of a file, or why it cannot.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := sc.Err(); err != nil {
		lines = append(lines, "(reading log: "+err.Error()+")")
	}
	return strings.Join(lines, "\n")
}
