package manual

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/localetcd"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/recovery"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// JoinOptions are what etcdadm join is told.
type JoinOptions struct {
	// Endpoint is a member's client URL, https://HOST:PORT.
	Endpoint string
	// CACert and CAKey, PEM: the cluster CA, copied from the first master.
	CACert, CAKey []byte
}

// Join adds this host to the cluster at Endpoint: as a learner, started
// with state existing, promoted once caught up. It is member join's own
// join (one implementation): Join checks the cluster and seeds this host's
// store from it (the CA, the spec with one more member, the settings, the
// members as peers), then runs member join. Refused, changing nothing:
// the endpoint unreachable, a CA that did not sign the cluster's
// certificates, a member down or a learner (a join in progress), this
// host's name taken by a member while this host has no data of it.
func Join(ctx context.Context, cfg member.Config, d member.Deps, o JoinOptions) (member.Result, error) {
	// The host lock is taken once the refusals are behind: a refused join
	// leaves nothing on the host, not even the lock file.
	held := func(run func() (member.Result, error)) (member.Result, error) {
		svc, release, err := localetcd.Hold(ctx, cfg.Root, "etcdadm join", d.Service)
		if err != nil {
			return member.Result{}, err
		}
		defer release()
		d.Service = svc
		return run()
	}
	ca, err := pki.ParseCA(o.CACert, o.CAKey)
	if err != nil {
		return member.Result{}, fmt.Errorf("manual: join: %w: the CA certificate and key: %w", ErrRefused, err)
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || u.Scheme != "https" || u.Port() == "" || u.Path != "" && u.Path != "/" {
		return member.Result{}, fmt.Errorf("manual: join: %w: endpoint %q: want https://HOST:PORT, the client URL of a member (the command 'etcdadm init' printed)", ErrRefused, o.Endpoint)
	}
	// A re-run after a crash (or a join on the automation's store) finds
	// the cluster declared already: member join knows how to go on.
	created, err := exists(ctx, d.Store, etcdmanager.ClusterCreatedKey)
	if err != nil || created {
		if err != nil {
			return member.Result{}, err
		}
		return held(func() (member.Result, error) { return member.Run(ctx, cfg, d) })
	}
	cfgTLS, err := clientTLS(ca)
	if err != nil {
		return member.Result{}, err
	}
	if err := probe(ctx, o.Endpoint, cfgTLS); err != nil {
		return member.Result{}, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{o.Endpoint}, TLS: cfgTLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return member.Result{}, fmt.Errorf("manual: join: %w", err)
	}
	defer cli.Close()
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	peers, version, settings, err := recovery.Inspect(ictx, cli)
	cancel()
	if err != nil {
		return member.Result{}, fmt.Errorf("manual: join: %w: the cluster at %s: %w", ErrRefused, o.Endpoint, err)
	}
	hasData := hasData(cfg)
	for _, p := range peers {
		if p.Name == cfg.Name && !hasData {
			return member.Result{}, fmt.Errorf("manual: join: %w: the name %s is taken by a healthy member (%s) and this host holds no data of it: give this host another name (--name), or run 'etcdadm reset' on that member's host first", ErrRefused, cfg.Name, p.PeerURL)
		}
	}
	return held(func() (member.Result, error) {
		if err := seed(ctx, d, o, peers, version, settings); err != nil {
			return member.Result{}, err
		}
		return member.Run(ctx, cfg, d)
	})
}

// clientTLS is a client certificate of ca, for this command only (its key
// stays in memory), trusting ca's bundle.
func clientTLS(ca *pki.CA) (*tls.Config, error) {
	certPEM, keyPEM, err := ca.IssueClient("etcdadm-join", time.Hour)
	if err != nil {
		return nil, fmt.Errorf("manual: join: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("manual: join: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, nil
}

// probe tells an unreachable endpoint from a CA that does not match, by
// one request to etcd's /health with the CA's certificate.
func probe(ctx context.Context, endpoint string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/health", nil)
	if err != nil {
		return fmt.Errorf("manual: join: %w", err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		return nil
	}
	s := err.Error()
	if strings.Contains(s, "x509:") || strings.Contains(s, "certificate") {
		return fmt.Errorf("manual: join: %w: %s does not share this CA (%v): copy ca.crt and ca.key from the master where 'etcdadm init' ran", ErrRefused, endpoint, err)
	}
	return fmt.Errorf("manual: join: %w: cannot reach %s (%v): check the address, and that etcd runs there ('etcdadm status' on that master)", ErrRefused, endpoint, err)
}

// seed writes what member join needs into this host's store, each write
// idempotent: the CA, the declaration (one more member than the cluster
// has, unless this host is one of them), the members as peers, the
// created marker. A store that already holds a declaration (the shared
// store of the automation, or a re-run) keeps it.
func seed(ctx context.Context, d member.Deps, o JoinOptions, peers []member.Peer, version string, settings clusterspec.Settings) error {
	st := d.Store
	if _, err := pki.Import(ctx, st, o.CACert, o.CAKey); err != nil {
		return fmt.Errorf("manual: join: %w (this host's store %s holds another cluster: 'etcdadm reset' first)", err, st)
	}
	if _, err := clusterspec.Load(ctx, st); errors.Is(err, clusterspec.ErrNotSeeded) {
		c := clusterspec.Cluster{Spec: etcdmanager.ClusterSpec{MemberCount: int32(len(peers) + 1), EtcdVersion: version}, Settings: settings}
		if err := clusterspec.Seed(ctx, st, c, false); err != nil {
			return fmt.Errorf("manual: join: %w", err)
		}
	} else if err != nil {
		return err
	}
	for _, p := range peers {
		p.Updated = d.Now().UTC()
		if err := member.Register(ctx, st, p); err != nil {
			return fmt.Errorf("manual: join: %w", err)
		}
	}
	created := fmt.Appendf(nil, `{"timestamp":%d}`, d.Now().UnixNano())
	if _, err := store.PutBytes(ctx, st, etcdmanager.ClusterCreatedKey, created, store.PutOptions{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrPrecondition) {
		return fmt.Errorf("manual: join: mark the cluster created: %w", err)
	}
	return nil
}

func hasData(cfg member.Config) bool {
	des, err := os.ReadDir(filepath.Join(member.DataDir(cfg), "member", "wal"))
	return err == nil && len(des) > 0
}
