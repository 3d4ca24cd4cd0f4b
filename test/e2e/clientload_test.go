//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// loadReport is what the client-load helper found: every write etcd
// acknowledged is readable with its value, and the watch opened before
// the first write delivered every one of them, in revision order, once.
type loadReport struct {
	Acked       int      `json:"acked"`
	FailedTries int      `json:"failedTries"`
	Lost        int      `json:"lost"`
	WatchEvents int      `json:"watchEvents"`
	WatchMissed int      `json:"watchMissed"`
	WatchErrors []string `json:"watchErrors"`
	// WatchResumes: watches ended by etcd for want of a leader (the
	// member the watch was on lost it), each opened again from the
	// revision after the last event seen, as kube-apiserver's watch cache
	// does; the events must still arrive once each, in order.
	WatchResumes int    `json:"watchResumes"`
	OutOfOrder   int    `json:"outOfOrder"`
	LongestFail  string `json:"longestStall"`
}

// helper runs this test binary as a helper (E2E_HELPER) in the switch
// namespace, where the hosts are reachable (one given etcd endpoints gets
// a client certificate issued from the store); its verdict is the last
// line it prints.
type helper struct {
	cmd    *exec.Cmd
	out    strings.Builder
	mu     sync.Mutex
	waited chan struct{}
}

func startHelper(t *testing.T, c *cluster, name string, endpoints []string, env ...string) *helper {
	t.Helper()
	h := &helper{waited: make(chan struct{})}
	h.cmd = c.n.Command(context.Background(), os.Args[0], "-test.run=^$")
	h.cmd.Env = append([]string{"E2E_HELPER=" + name}, env...)
	if len(endpoints) > 0 { // it talks to etcd: a client certificate of its own
		dir := t.TempDir()
		if out, err := c.adm(t, "pki", "issue-client", "e2e-"+name, "--store", c.storeURL, "--out-dir", dir); err != nil {
			t.Fatalf("issue-client: %v\n%s", err, out)
		}
		h.cmd.Env = append(h.cmd.Env, "E2E_ENDPOINTS="+strings.Join(endpoints, ","),
			"E2E_CERT="+filepath.Join(dir, "e2e-"+name+".crt"), "E2E_KEY="+filepath.Join(dir, "e2e-"+name+".key"), "E2E_CACERT="+filepath.Join(dir, "ca.crt"))
	}
	h.cmd.Stdout = &lockedWriter{mu: &h.mu, b: &h.out}
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.cmd.Wait(); close(h.waited) }()
	t.Cleanup(func() { h.cmd.Process.Kill(); <-h.waited })
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// finish stops the helper (SIGTERM) and decodes its verdict into v.
func (h *helper) finish(t *testing.T, timeout time.Duration, v any) {
	t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.waited:
	case <-time.After(timeout):
		t.Fatalf("helper %s did not finish within %v", h.cmd.Env[0], timeout)
	}
	h.mu.Lock()
	out := h.out.String()
	h.mu.Unlock()
	if err := json.Unmarshal([]byte(lastLine(out)), v); err != nil {
		t.Fatalf("helper %s: %v\n%s", h.cmd.Env[0], err, out)
	}
}

// clientLoad is the load helper: a writer and a watch.
type clientLoad struct{ h *helper }

func startClientLoad(t *testing.T, c *cluster, endpoints []string) clientLoad {
	t.Helper()
	return clientLoad{startHelper(t, c, "load", endpoints)}
}

func (cl clientLoad) finish(t *testing.T) loadReport {
	t.Helper()
	var r loadReport
	cl.h.finish(t, 2*time.Minute, &r)
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// helperTLS is a helper's client TLS: the certificate startHelper issued.
func helperTLS() (*tls.Config, error) {
	return transport.TLSInfo{CertFile: os.Getenv("E2E_CERT"), KeyFile: os.Getenv("E2E_KEY"), TrustedCAFile: os.Getenv("E2E_CACERT")}.ClientConfig()
}

// runLoadHelper is the helper's body (E2E_HELPER=load): write until
// SIGTERM, watching from before the first write, then check.
func runLoadHelper() error {
	tc, err := helperTLS()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv("E2E_ENDPOINTS"), ","), TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	defer wcancel()
	var mu sync.Mutex
	seen := map[string]int{}
	var r loadReport
	// Watch from the revision after now: before the first write.
	gctx, gcancel := context.WithTimeout(context.Background(), time.Minute)
	gr0, err := cli.Get(gctx, "/load/", clientv3.WithCountOnly())
	gcancel()
	if err != nil {
		return err
	}
	lastRev := gr0.Header.Revision
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			resume := false
			for resp := range cli.Watch(wctx, "/load/", clientv3.WithPrefix(), clientv3.WithRev(lastRev+1)) {
				mu.Lock()
				if err := resp.Err(); errors.Is(err, rpctypes.ErrNoLeader) {
					resume = true
					r.WatchResumes++
				} else if err != nil {
					r.WatchErrors = append(r.WatchErrors, err.Error())
				}
				for _, ev := range resp.Events {
					seen[string(ev.Kv.Key)]++
					r.WatchEvents++
					if ev.Kv.ModRevision <= lastRev {
						r.OutOfOrder++
					}
					lastRev = ev.Kv.ModRevision
				}
				mu.Unlock()
			}
			if !resume || wctx.Err() != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	var acked []string
	var longest, failingSince time.Duration
	start := time.Now()
	for i := 0; ; i++ {
		select {
		case <-stop:
			goto check
		default:
		}
		k := fmt.Sprintf("/load/%07d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, k, "v"+k)
		cancel()
		if err != nil {
			r.FailedTries++
			if failingSince == 0 {
				failingSince = time.Since(start)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if failingSince != 0 {
			longest = max(longest, time.Since(start)-failingSince)
			failingSince = 0
		}
		acked = append(acked, k)
		time.Sleep(20 * time.Millisecond)
	}
check:
	r.Acked = len(acked)
	r.LongestFail = longest.Round(time.Millisecond).String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gr, err := cli.Get(ctx, "/load/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	have := map[string]string{}
	for _, kv := range gr.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	for _, k := range acked {
		if have[k] != "v"+k {
			r.Lost++
		}
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		mu.Lock()
		missed := 0
		for _, k := range acked {
			if seen[k] != 1 {
				missed++
			}
		}
		r.WatchMissed = missed
		mu.Unlock()
		if missed == 0 {
			break
		}
	}
	wcancel()
	<-watchDone
	b, _ := json.Marshal(r)
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, string(b))
	return w.Flush()
}
