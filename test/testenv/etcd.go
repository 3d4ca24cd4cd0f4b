package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdReadyTimeout bounds how long members may take to serve a
// linearizable read after they were started.
const etcdReadyTimeout = 30 * time.Second

// MemberConfig is how to start one etcd member.
type MemberConfig struct {
	Name    string
	DataDir string // may hold a restored or earlier member's data
	// ClientPort and PeerPort on 127.0.0.1; 0 picks a free port.
	ClientPort, PeerPort int
	// InitialCluster is etcd's --initial-cluster; "" means this member
	// alone. etcd ignores it (and the state) when DataDir holds a member.
	InitialCluster string
	// InitialClusterState is "new" (the default) or "existing".
	InitialClusterState string
}

// EtcdMember is one running etcd process.
type EtcdMember struct {
	Name, Version, DataDir, ClientURL, PeerURL string
	// LogFile collects the member's stdout and stderr, next to DataDir.
	LogFile string
	// Config is what the member was started with, ports filled in: pass it
	// to StartEtcdMember to start the member again after Stop or Kill.
	Config MemberConfig

	t    testing.TB
	pki  *PKI
	proc *proc
}

// StartEtcdCluster starts an n-member cluster of an etcd version with mutual
// TLS on client and peer ports, and waits until every member serves
// linearizable reads.
func StartEtcdCluster(t testing.TB, version string, n int, pki *PKI) []*EtcdMember {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: StartEtcdCluster: need at least one member, got %d", n)
	}
	base := t.TempDir()
	cfgs := make([]MemberConfig, n)
	peers := make([]string, n)
	for i := range cfgs {
		cfgs[i] = MemberConfig{
			Name:                fmt.Sprintf("m%d", i),
			DataDir:             filepath.Join(base, fmt.Sprintf("m%d", i)),
			ClientPort:          FreePort(t),
			PeerPort:            FreePort(t),
			InitialClusterState: "new",
		}
		peers[i] = cfgs[i].Name + "=" + loopbackURL(cfgs[i].PeerPort)
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(peers, ",")
	}
	return StartEtcdMembers(t, version, cfgs, pki)
}

// StartEtcdMember starts one member, for example on a restored data dir,
// and waits until it serves linearizable reads (so its cluster must have
// quorum once it runs; start members that need each other together with
// StartEtcdMembers).
func StartEtcdMember(t testing.TB, version string, m MemberConfig, pki *PKI) *EtcdMember {
	t.Helper()
	return StartEtcdMembers(t, version, []MemberConfig{m}, pki)[0]
}

// StartEtcdMembers starts members at once and waits until each serves
// linearizable reads.
func StartEtcdMembers(t testing.TB, version string, cfgs []MemberConfig, pki *PKI) []*EtcdMember {
	t.Helper()
	if pki == nil {
		t.Fatalf("testenv: etcd members need a PKI (testenv.NewPKI)")
	}
	bin := EtcdBin(t, version, "etcd")
	members := make([]*EtcdMember, len(cfgs))
	for i, c := range cfgs {
		members[i] = launchMember(t, bin, version, c, pki)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for i, m := range members {
		wg.Go(func() { errs[i] = m.waitReady() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("testenv: etcd %s: %v", version, err)
	}
	return members
}

func launchMember(t testing.TB, bin, version string, c MemberConfig, pki *PKI) *EtcdMember {
	t.Helper()
	if c.Name == "" || c.DataDir == "" {
		t.Fatalf("testenv: etcd member needs a Name and a DataDir: %+v", c)
	}
	if c.ClientPort == 0 {
		c.ClientPort = FreePort(t)
	}
	if c.PeerPort == 0 {
		c.PeerPort = FreePort(t)
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + loopbackURL(c.PeerPort)
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = "new"
	}
	if err := os.MkdirAll(filepath.Dir(c.DataDir), 0o700); err != nil {
		t.Fatalf("testenv: etcd member %s: %v", c.Name, err)
	}
	m := &EtcdMember{
		Name:      c.Name,
		Version:   version,
		DataDir:   c.DataDir,
		ClientURL: loopbackURL(c.ClientPort),
		PeerURL:   loopbackURL(c.PeerPort),
		LogFile:   filepath.Join(filepath.Dir(c.DataDir), c.Name+".log"),
		Config:    c,
		t:         t,
		pki:       pki,
	}
	// Ports are unique per cluster, so the cluster's peer list makes a
	// token that keeps members of different tests apart.
	sum := sha256.Sum256([]byte(c.InitialCluster))
	args := []string{
		"--name", c.Name,
		"--data-dir", c.DataDir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", c.InitialCluster,
		"--initial-cluster-state", c.InitialClusterState,
		"--initial-cluster-token", "testenv-" + hex.EncodeToString(sum[:6]),
		"--client-cert-auth",
		"--trusted-ca-file", pki.CACert,
		"--cert-file", pki.ServerCert,
		"--key-file", pki.ServerKey,
		"--peer-client-cert-auth",
		"--peer-trusted-ca-file", pki.CACert,
		"--peer-cert-file", pki.PeerCert,
		"--peer-key-file", pki.PeerKey,
	}
	home := filepath.Dir(c.DataDir)
	m.proc = startProc(t, "etcd "+version+" member "+c.Name, m.LogFile, []string{"HOME=" + home}, bin, args...)
	return m
}

func loopbackURL(port int) string {
	return "https://127.0.0.1:" + strconv.Itoa(port)
}

// waitReady waits until a linearizable read through the member succeeds.
func (m *EtcdMember) waitReady() error {
	cli, err := m.newClient()
	if err != nil {
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	defer cli.Close()
	host := strings.TrimPrefix(m.ClientURL, "https://")
	err = waitFor(etcdReadyTimeout, 100*time.Millisecond, m.proc.exited, func() error {
		// Dial first: the client logs every refused connection.
		conn, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			return err
		}
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = cli.Get(ctx, "testenv-health")
		return err
	})
	if err != nil {
		if exit := m.proc.exitErr(); !m.proc.running() {
			err = fmt.Errorf("%w (exit: %v)", err, exit)
		}
		return fmt.Errorf("member %s at %s (log %s): %w", m.Name, m.ClientURL, m.LogFile, err)
	}
	return nil
}

func (m *EtcdMember) newClient() (*clientv3.Client, error) {
	tlsc, err := m.pki.clientTLS()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{m.ClientURL},
		TLS:         tlsc,
		DialTimeout: 5 * time.Second,
	})
}

// Endpoint is the member's client URL, https://127.0.0.1:PORT.
func (m *EtcdMember) Endpoint() string { return m.ClientURL }

// Client is a client (mutual TLS) talking to this member only, closed when
// the test ends.
func (m *EtcdMember) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := m.newClient()
	if err != nil {
		t.Fatalf("testenv: etcd client for %s: %v", m.Name, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Stop ends the member gracefully (SIGTERM), killing it if it has not
// exited within 10 s. Stopping a stopped member does nothing.
func (m *EtcdMember) Stop() {
	if err := m.proc.stop(); err != nil {
		m.t.Errorf("testenv: %v", err)
	}
}

// Kill ends the member with SIGKILL, as a crash or power loss would, and
// waits until it is gone.
func (m *EtcdMember) Kill() {
	if err := m.proc.kill(); err != nil {
		m.t.Errorf("testenv: %v", err)
	}
}

// Running reports whether the member's process has not exited.
func (m *EtcdMember) Running() bool { return m.proc.running() }
