package member

import (
	"context"
	"crypto/tls"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
)

// rolloutLockKey serializes version switches: one member at a time in the
// whole cluster.
const rolloutLockKey = "/etcdadm/locks/rollout"

// Session is this host's member connected to its cluster, for operations
// on a running cluster beyond membership (the version switcher). It
// shares member join's client, TLS, locks, retries, health probe, leader
// hand-over and backup, so each rule has one implementation.
type Session struct {
	j   *joiner
	Cli *clientv3.Client // every registered member's endpoint
}

// Open loads the cluster declaration and connects.
func Open(ctx context.Context, cfg Config, d Deps) (*Session, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	j, cli, err := connect(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	return &Session{j: j, Cli: cli}, nil
}

// Close closes the client.
func (s *Session) Close() error { return s.Cli.Close() }

// Self is this host's member.
func (s *Session) Self() Peer { return s.j.me }

// Cluster is the declaration loaded at Open.
func (s *Session) Cluster() clusterspec.Cluster { return s.j.cluster }

// Config is this host's member configuration (defaults applied).
func (s *Session) Config() Config { return s.j.cfg }

// TLS is the client TLS configuration (nil for an insecure cluster).
func (s *Session) TLS() *tls.Config { return s.j.tls }

// Client dials the given endpoints with this member's credentials.
func (s *Session) Client(eps []string) (*clientv3.Client, error) { return s.j.client(eps) }

// RolloutLock takes the cluster-wide version-switch lock.
// The context returned ends if the lock is lost (see lockKey): do the
// work under the lock with it.
func (s *Session) RolloutLock(ctx context.Context) (held context.Context, unlock func(), err error) {
	return s.j.lockKey(ctx, s.Cli, rolloutLockKey, "rollout lock")
}

// MemberList lists members, retrying through leader changes.
func (s *Session) MemberList(ctx context.Context) ([]*etcdserverpb.Member, error) {
	ml, err := s.j.memberList(ctx, s.Cli)
	if err != nil {
		return nil, err
	}
	return ml.Members, nil
}

// Healthy probes one member.
func (s *Session) Healthy(ctx context.Context, m *etcdserverpb.Member) bool {
	return s.j.healthy(ctx, m)
}

// Retry runs op until it succeeds or fails with an error etcd does not
// clear up by itself (leader change, member restarting), within the
// configured timeout.
func (s *Session) Retry(ctx context.Context, what string, op func() error) error {
	return s.j.retry(ctx, what, op)
}

// MoveLeaderOff hands leadership from m to a healthy voter, if m leads.
func (s *Session) MoveLeaderOff(ctx context.Context, m *etcdserverpb.Member, voters []*etcdserverpb.Member, healthy map[uint64]bool) error {
	return s.j.moveLeaderOff(ctx, s.Cli, m, voters, healthy)
}

// Backup takes a verified backup into the store, from any healthy
// member, and returns its name.
func (s *Session) Backup(ctx context.Context) (string, error) {
	name, err := s.j.backup(ctx, s.Cli)
	if err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	return name, nil
}

// RefreshCerts brings this member's certificate directory up to date with
// the CA in the store: the bundle, and, with reissue, certificates of the
// signing CA only (a CA rotation's reissue phase). It returns the
// certificate files it wrote. etcd serves renewed certificates on the
// next connection; a changed bundle is trusted after a restart.
func (s *Session) RefreshCerts(ctx context.Context, reissue bool) ([]string, error) {
	ca, err := pki.LoadCA(ctx, s.j.d.Store)
	if err != nil {
		return nil, err
	}
	var issued []string
	if !reissue {
		err = ca.IssueMember(ctx, s.j.cfg.PKIDir, s.j.certRequest(), s.j.cfg.Owner)
	} else {
		issued, err = ca.ReissueMember(ctx, s.j.cfg.PKIDir, s.j.certRequest(), s.j.cfg.Owner)
	}
	if err != nil {
		return issued, err
	}
	return issued, s.reloadTLS()
}

// reloadTLS makes the session's clients trust the bundle the directory
// holds now. A switcher run can outlive a CA rotation's phases: kept on
// the bundle it opened with (the old CA alone), it could not verify a
// member reissued from the new CA, took it for unhealthy and waited for
// good (found by the adoption test under load).
func (s *Session) reloadTLS() error {
	if s.j.tls == nil {
		return nil
	}
	if err := s.j.loadClientTLS(); err != nil {
		return err
	}
	cli, err := s.j.client(s.Cli.Endpoints())
	if err != nil {
		return err
	}
	old := s.Cli
	s.Cli = cli
	return old.Close()
}

// rolloutLockHeld: a version switch or a CA-rotation restart holds the
// rollout lock, so a member may be mid-restart and look unhealthy.
func rolloutLockHeld(ctx context.Context, cli *clientv3.Client) (bool, error) {
	r, err := cli.Get(ctx, rolloutLockKey+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return r.Count > 0, nil
}
