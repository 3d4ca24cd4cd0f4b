package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdadm/etcdadm-immutable/internal/backup"
	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
	"github.com/etcdadm/etcdadm-immutable/internal/uploader"
)

// AdoptionKey records an adoption: the cluster taken over, its backup,
// how far the adoption got (a re-run goes on from there).
const AdoptionKey = "etcdadm/adoption.json"

// ErrNotAdoptable: the cluster or the store is not in a state to adopt
// (the message says what and what to do); nothing was written.
var ErrNotAdoptable = errors.New("cannot adopt")

// Adoption is our record of taking over a running etcd.
type Adoption struct {
	ClusterID   string        `json:"clusterID"`
	EtcdVersion string        `json:"etcdVersion"`
	Members     []member.Peer `json:"members"`
	Backup      string        `json:"backup,omitempty"`
	Done        bool          `json:"done"`
	Started     time.Time     `json:"started"`
	Updated     time.Time     `json:"updated"`
}

// AdoptInput is what the operator gives: a client of the running cluster
// (mutual TLS with a client certificate it accepts) and the CA that
// signed its certificates.
type AdoptInput struct {
	Client *clientv3.Client
	// ClientCertPEM is the client certificate the client presents: it
	// must be signed by the CA imported, or members we issue certificates
	// for would not be trusted by the members running.
	ClientCertPEM []byte
	// CACertPEM and CAKeyPEM: the existing CA; nil for a plaintext
	// cluster.
	CACertPEM, CAKeyPEM []byte
	ClusterName         string
	Log                 *slog.Logger
	Now                 func() time.Time
}

// AdoptReport says what was found and done.
type AdoptReport struct {
	Adoption
	Settings  clusterspec.Settings
	Warnings  []string
	CAStored  bool
	Resumed   bool
	MemberIDs map[string]string
}

// Adopt takes over a running etcd that we did not create: it reads the
// members, their version and TLS, takes a verified backup into the store,
// imports the CA (so every existing certificate keeps working), seeds the
// spec and settings, registers the members as peers and marks the cluster
// created. Hosts that then boot our config with a member's name rejoin
// with its data. Everything is checked before anything is written; a
// re-run after a crash goes on where the record says.
func Adopt(ctx context.Context, st store.Store, in AdoptInput) (AdoptReport, error) {
	if in.Log == nil {
		in.Log = slog.New(slog.DiscardHandler)
	}
	if in.Now == nil {
		in.Now = time.Now
	}
	var rep AdoptReport
	found, err := inspectCluster(ctx, in.Client)
	if err != nil {
		return rep, err
	}
	rep.Adoption, rep.Settings, rep.Warnings, rep.MemberIDs = found.adoption, found.settings, found.warnings, found.ids
	rep.Settings.ClusterName = in.ClusterName

	prev, etag, err := loadAdoption(ctx, st)
	if err != nil {
		return rep, err
	}
	if prev != nil && prev.ClusterID != rep.ClusterID {
		return rep, fmt.Errorf("%w: %s already adopted cluster %s, this is cluster %s: use an empty store (another prefix) for it", ErrNotAdoptable, st, prev.ClusterID, rep.ClusterID)
	}
	if prev == nil {
		if err := emptyForAdoption(ctx, st); err != nil {
			return rep, err
		}
	}
	if err := checkCA(in); err != nil {
		return rep, err
	}
	if rep.Settings.TLS == "mtls" && len(in.CACertPEM) == 0 {
		return rep, fmt.Errorf("%w: the cluster uses TLS: give its CA (--ca-cert and --ca-key), so that existing certificates keep working", ErrNotAdoptable)
	}
	if rep.Settings.TLS == "insecure" && len(in.CACertPEM) > 0 {
		rep.Warnings = append(rep.Warnings, "the cluster is plaintext: the CA given is not imported")
		in.CACertPEM, in.CAKeyPEM = nil, nil
	}

	// Checked: from here on, write. The record first, so a re-run knows.
	if prev != nil {
		rep.Resumed = true
		rep.Backup, rep.Started = prev.Backup, prev.Started
		if prev.Done {
			rep.Done = true
			return rep, nil
		}
	} else {
		rep.Started = in.Now().UTC()
	}
	save := func() error {
		rep.Updated = in.Now().UTC()
		tag, err := store.PutJSON(ctx, st, AdoptionKey, rep.Adoption, store.Since(etag))
		if err != nil {
			return fmt.Errorf("adopt: record %s: %w", AdoptionKey, err)
		}
		etag = tag
		return nil
	}
	if err := save(); err != nil {
		return rep, err
	}
	if rep.Backup == "" {
		name, err := adoptionBackup(ctx, st, in, found.leaderEndpoint)
		if err != nil {
			return rep, err
		}
		rep.Backup = name
		if err := save(); err != nil {
			return rep, err
		}
		in.Log.Info("backup taken and verified", "backup", name)
	}
	if len(in.CACertPEM) > 0 {
		if rep.CAStored, err = pki.Import(ctx, st, in.CACertPEM, in.CAKeyPEM); err != nil {
			return rep, err
		}
	}
	cl := clusterspec.Cluster{
		Spec:     etcdmanager.ClusterSpec{MemberCount: int32(len(rep.Members)), EtcdVersion: rep.EtcdVersion},
		Settings: rep.Settings,
	}
	if err := clusterspec.Seed(ctx, st, cl, false); err != nil {
		return rep, fmt.Errorf("adopt: %w", err)
	}
	for _, p := range rep.Members {
		p.Updated = in.Now().UTC()
		if err := member.Register(ctx, st, p); err != nil {
			return rep, fmt.Errorf("adopt: %w", err)
		}
	}
	created := fmt.Appendf(nil, `{"timestamp":%d}`, in.Now().UnixNano())
	if _, err := store.PutBytes(ctx, st, etcdmanager.ClusterCreatedKey, created, store.PutOptions{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrPrecondition) {
		return rep, fmt.Errorf("adopt: mark cluster created: %w", err)
	}
	rep.Done = true
	return rep, save()
}

// LoadAdoption reads the adoption record; nil when the store has none.
func LoadAdoption(ctx context.Context, st store.Store) (*Adoption, error) {
	a, _, err := loadAdoption(ctx, st)
	return a, err
}

func loadAdoption(ctx context.Context, st store.Store) (*Adoption, string, error) {
	var a Adoption
	etag, err := store.GetJSON(ctx, st, AdoptionKey, &a)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("adopt: %w", err)
	}
	return &a, etag, nil
}

// emptyForAdoption refuses a store that already describes a cluster.
func emptyForAdoption(ctx context.Context, st store.Store) error {
	for _, k := range []string{etcdmanager.ClusterCreatedKey, etcdmanager.ClusterSpecKey, member.PlanKey} {
		if _, err := st.Stat(ctx, k); err == nil {
			if t, terr := TornDown(ctx, st); terr == nil && t != nil {
				return fmt.Errorf("%w: %s holds a cluster torn down at %s (its spec, backups and PKI are kept there): adopt into an empty store or prefix", ErrNotAdoptable, st, t.At.UTC().Format(time.RFC3339))
			}
			return fmt.Errorf("%w: %s already holds a cluster (%s): adopt into an empty store or prefix, or 'etcdadm teardown' the one there first", ErrNotAdoptable, st, k)
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("adopt: %s: %w", k, err)
		}
	}
	return nil
}

func checkCA(in AdoptInput) error {
	if len(in.CACertPEM) == 0 {
		return nil
	}
	ca, err := pki.ParseCA(in.CACertPEM, in.CAKeyPEM)
	if err != nil {
		return fmt.Errorf("%w: --ca-cert/--ca-key: %w", ErrNotAdoptable, err)
	}
	if len(in.ClientCertPEM) > 0 {
		ok, err := ca.IssuedPEM(in.ClientCertPEM)
		if err != nil {
			return fmt.Errorf("%w: --cert: %w", ErrNotAdoptable, err)
		}
		if !ok {
			return fmt.Errorf("%w: the client certificate (--cert) was not signed by the CA given (--ca-cert): give the CA that signed the cluster's certificates", ErrNotAdoptable)
		}
	}
	return nil
}

// Inspect reads a running cluster as Adopt does, with the same refusals
// (a member down, a learner, names our rules refuse, mixed or unsupported
// versions): its members, their etcd version and the settings new members
// need (ports, TLS, DNS suffix). etcdadm join seeds a host's own store
// from it.
func Inspect(ctx context.Context, cli *clientv3.Client) (members []member.Peer, version string, settings clusterspec.Settings, err error) {
	f, err := inspectCluster(ctx, cli)
	return f.adoption.Members, f.adoption.EtcdVersion, f.settings, err
}

type clusterFound struct {
	adoption       Adoption
	settings       clusterspec.Settings
	warnings       []string
	ids            map[string]string
	leaderEndpoint string
}

// inspectCluster reads the running cluster and refuses what we cannot
// run: a member down, a learner, names our rules refuse, a version we do
// not run.
func inspectCluster(ctx context.Context, cli *clientv3.Client) (clusterFound, error) {
	var f clusterFound
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return f, fmt.Errorf("adopt: member list: %w", err)
	}
	f.adoption.ClusterID = fmt.Sprintf("%x", ml.Header.ClusterId)
	f.ids = map[string]string{}
	var problems []string
	versions := map[string]bool{}
	var hosts, schemes []string
	var clientPorts, peerPorts []int
	for _, m := range ml.Members {
		if m.IsLearner {
			problems = append(problems, fmt.Sprintf("member %s is a learner: wait until it is promoted (or remove it)", m.Name))
			continue
		}
		if err := pki.CheckMemberName(m.Name); err != nil {
			problems = append(problems, fmt.Sprintf("member %x: %v; our hosts take their member name from their host name or volume, so it must be a DNS label", m.ID, err))
			continue
		}
		if len(m.PeerURLs) == 0 || len(m.ClientURLs) == 0 {
			problems = append(problems, fmt.Sprintf("member %s has no peer or client URL (never started?)", m.Name))
			continue
		}
		st, err := member.MemberStatus(ctx, cli, m)
		if err != nil {
			problems = append(problems, fmt.Sprintf("member %s does not answer (%v): adopt a healthy cluster", m.Name, err))
			continue
		}
		versions[st.Version] = true
		if st.Leader == st.Header.MemberId {
			f.leaderEndpoint = m.ClientURLs[0]
		}
		p := member.Peer{Name: m.Name, PeerURL: m.PeerURLs[0], ClientURL: pickClientURL(m.ClientURLs)}
		f.adoption.Members = append(f.adoption.Members, p)
		f.ids[m.Name] = fmt.Sprintf("%x", m.ID)
		pu, err1 := url.Parse(p.PeerURL)
		cu, err2 := url.Parse(p.ClientURL)
		if err := errors.Join(err1, err2); err != nil {
			problems = append(problems, fmt.Sprintf("member %s: %v", m.Name, err))
			continue
		}
		hosts = append(hosts, m.Name+"|"+pu.Hostname())
		schemes = append(schemes, pu.Scheme, cu.Scheme)
		pp, _ := strconv.Atoi(pu.Port())
		cp, _ := strconv.Atoi(cu.Port())
		peerPorts, clientPorts = append(peerPorts, pp), append(clientPorts, cp)
	}
	if len(problems) > 0 {
		return f, fmt.Errorf("%w: %s; nothing was written", ErrNotAdoptable, strings.Join(problems, "; "))
	}
	if len(versions) != 1 {
		return f, fmt.Errorf("%w: members run different etcd versions (%s): finish the upgrade first", ErrNotAdoptable, strings.Join(slices.Sorted(maps.Keys(versions)), ", "))
	}
	for v := range versions {
		f.adoption.EtcdVersion = v
	}
	if err := clusterspec.CheckVersion(f.adoption.EtcdVersion); err != nil {
		return f, fmt.Errorf("%w: %w; upgrade it to 3.5 with etcd's own procedure first", ErrNotAdoptable, err)
	}
	if n := len(f.adoption.Members); n < 1 || n > 7 {
		return f, fmt.Errorf("%w: %d members (we run 1 to 7)", ErrNotAdoptable, n)
	}
	slices.Sort(schemes)
	if schemes = slices.Compact(schemes); len(schemes) != 1 {
		return f, fmt.Errorf("%w: members mix http and https URLs (%v)", ErrNotAdoptable, schemes)
	}
	f.settings = clusterspec.Settings{TLS: "mtls", PeerPort: mostCommon(peerPorts), ClientPort: mostCommon(clientPorts)}
	if schemes[0] == "http" {
		f.settings.TLS = "insecure"
		f.warnings = append(f.warnings, "the cluster is plaintext (http): it is adopted as --tls=insecure")
	}
	if f.leaderEndpoint == "" {
		return f, fmt.Errorf("%w: no member says it is the leader: wait for an election", ErrNotAdoptable)
	}
	f.settings.DNSSuffix, f.warnings = dnsSuffix(hosts, f.warnings)
	f.settings.ClusterToken = "adopted-" + f.adoption.ClusterID
	if slices.Min(peerPorts) != slices.Max(peerPorts) || slices.Min(clientPorts) != slices.Max(clientPorts) {
		f.warnings = append(f.warnings, fmt.Sprintf("members use different ports; new members will use client port %d and peer port %d", f.settings.ClientPort, f.settings.PeerPort))
	}
	return f, nil
}

// pickClientURL prefers a URL other hosts can reach (not loopback, when
// the member has one).
func pickClientURL(us []string) string {
	for _, u := range us {
		pu, err := url.Parse(u)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(pu.Hostname()); pu.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return u
		}
	}
	return us[0]
}

// dnsSuffix is the suffix when every member's peer host is NAME.SUFFIX
// with one SUFFIX; "" (reached by address) otherwise.
func dnsSuffix(nameHosts []string, warnings []string) (string, []string) {
	suffix, byName := "", true
	for _, nh := range nameHosts {
		name, host, _ := strings.Cut(nh, "|")
		s, ok := strings.CutPrefix(host, name+".")
		if !ok || net.ParseIP(host) != nil || (suffix != "" && s != suffix) {
			byName = false
			break
		}
		suffix = s
	}
	if byName && suffix != "" {
		return suffix, warnings
	}
	for _, nh := range nameHosts {
		if _, host, _ := strings.Cut(nh, "|"); net.ParseIP(host) == nil {
			return "", append(warnings, fmt.Sprintf("peer URLs name hosts (%s) that are not MEMBER.SUFFIX: rejoining members advertise their address and their peer URL is updated", host))
		}
	}
	return "", warnings
}

// mostCommon is the port most members use (the lowest of a tie).
func mostCommon(ps []int) int {
	count := map[int]int{}
	best := 0
	for _, p := range ps {
		count[p]++
		if count[p] > count[best] || (count[p] == count[best] && p < best) {
			best = p
		}
	}
	return best
}

// adoptionBackup streams a snapshot of the leader into the store as the
// uploader does, then verifies it end to end.
func adoptionBackup(ctx context.Context, st store.Store, in AdoptInput, endpoint string) (string, error) {
	out, err := uploader.Run(ctx, uploader.Config{Endpoint: endpoint, AnyMember: true, SkipPrune: true, StaleAfter: time.Hour, Retention: backup.DefaultPolicy()}, in.Client, st, in.Log, in.Now)
	if err != nil {
		return "", fmt.Errorf("adopt: backup: %w", err)
	}
	if _, err := backup.Verify(ctx, st, out.Backup, ""); err != nil {
		return "", fmt.Errorf("adopt: verify backup %s: %w", out.Backup, err)
	}
	return out.Backup, nil
}
