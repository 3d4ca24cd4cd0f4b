// Package clusterspec is what the operator declares for a cluster: the
// etcd-manager-compatible spec (control/etcd-cluster-spec: member count and
// etcd version) and our own settings (etcdadm/settings.json: name, token,
// DNS suffix, ports, TLS mode). It validates them and reads and writes them
// in the store; every binary that acts on the cluster reads them from here.
package clusterspec

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// RepairAdvice is what to run when the spec in the store cannot be read.
const RepairAdvice = "rewrite it with 'etcdadm seed --force --members N --version V' (the cluster token is kept), or restore the object from your bucket's versioning"

// SettingsKey is where our settings live in the store.
const SettingsKey = "etcdadm/settings.json"

// Errors.
var (
	ErrNotSeeded = errors.New("the store holds no cluster spec: run 'etcdadm seed' first")
	ErrInvalid   = errors.New("invalid cluster spec")
	ErrConflict  = errors.New("the store already holds a different cluster spec")
)

// supportedMinor reports whether we run etcd minor m ("3.6") in place.
func supportedMinor(m string) bool { return m == "3.5" || m == "3.6" || m == "3.7" }

var versionRE = regexp.MustCompile(`^(3\.[0-9]+)\.([0-9]+)$`)

// Settings are ours, beside etcd-manager's spec.
type Settings struct {
	ClusterName string `json:"clusterName"`
	// ClusterToken is etcd's --initial-cluster-token: it keeps members of
	// two clusters from ever joining each other.
	ClusterToken string `json:"clusterToken"`
	// DNSSuffix: member NAME is reached as NAME.DNSSuffix ("" = by address).
	DNSSuffix  string `json:"dnsSuffix,omitempty"`
	ClientPort int    `json:"clientPort"`
	PeerPort   int    `json:"peerPort"`
	// BackupInterval is not used: the snapshot timer's schedule is
	// rendered into the hosts' config ('etcdadm render --backup-interval').
	// Kept so settings written by earlier versions, read strictly, parse.
	BackupInterval string `json:"backupInterval,omitempty"`
	// TLS is "mtls" (the default) or "insecure" (plaintext, tests only).
	TLS string `json:"tls"`
}

// Cluster is the whole declaration.
type Cluster struct {
	Spec     etcdmanager.ClusterSpec
	Settings Settings
}

// Defaults fills what the operator left out. The token is random, so two
// clusters seeded with the same name still never mix.
func (c *Cluster) Defaults() error {
	s := &c.Settings
	if s.ClusterName == "" {
		s.ClusterName = "etcd"
	}
	if s.ClusterToken == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		s.ClusterToken = s.ClusterName + "-" + hex.EncodeToString(b[:])
	}
	if s.ClientPort == 0 {
		s.ClientPort = 2379
	}
	if s.PeerPort == 0 {
		s.PeerPort = 2380
	}
	if s.TLS == "" {
		s.TLS = "mtls"
	}
	return nil
}

// Validate returns the problems (errors) and the warnings of a declaration.
func (c Cluster) Validate() (warnings []string, err error) {
	var errs []error
	n := c.Spec.MemberCount
	switch {
	case n < 1 || n > 7:
		errs = append(errs, fmt.Errorf("memberCount %d: must be 1 to 7 (3 or 5 for production)", n))
	case n%2 == 0:
		warnings = append(warnings, fmt.Sprintf("memberCount %d is even: it tolerates no more failures than %d members and needs a bigger quorum; prefer %d", n, n-1, n+1))
	}
	if err := CheckVersion(c.Spec.EtcdVersion); err != nil {
		errs = append(errs, err)
	}
	s := c.Settings
	if s.TLS != "mtls" && s.TLS != "insecure" {
		errs = append(errs, fmt.Errorf("tls %q: must be mtls or insecure", s.TLS))
	}
	for name, p := range map[string]int{"clientPort": s.ClientPort, "peerPort": s.PeerPort} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s %d: not a TCP port", name, p))
		}
	}
	if s.ClientPort == s.PeerPort {
		errs = append(errs, fmt.Errorf("clientPort and peerPort are both %d", s.ClientPort))
	}
	if s.ClusterToken == "" {
		errs = append(errs, fmt.Errorf("clusterToken is empty"))
	}
	if len(errs) > 0 {
		return warnings, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return warnings, nil
}

// CheckClusterName is the rule for a new cluster's name: a DNS label
// (1 to 63 of a-z, 0-9 and inner '-'). The name leads the initial cluster
// token, which etcd.env carries unquoted and etcd compares byte for byte,
// and it names the cluster where names must be portable (etcd-manager's
// volume tags <cluster>-<member>, metric labels, file names): a DNS label
// is safe in all of them, and lower case keeps "Prod" and "prod" from
// being two clusters.
func CheckClusterName(name string) error {
	if !pki.IsDNSLabel(name) {
		return fmt.Errorf("cluster name %q: want 1 to 63 of a-z, 0-9 and inner '-' (a DNS label, e.g. etcd or prod-eu1): it leads the cluster token in etcd.env", name)
	}
	return nil
}

// CheckDNSSuffix is the rule for the DNS suffix ("" = members by address):
// NAME.SUFFIX goes into DNS and into the member certificates, so it must
// be a DNS name (pki.IsDNSName), e.g. internal.prod.example.com.
func CheckDNSSuffix(s string) error {
	if s != "" && (!pki.IsDNSName(s) || len(s) > 253-64) {
		return fmt.Errorf("dns suffix %q: want a DNS name such as internal.prod.example.com (labels of a-z, 0-9 and inner '-', joined by single dots, no trailing dot, room for a member name in front)", s)
	}
	return nil
}

// ValidateNew is Validate for a declaration about to be written: it also
// holds the name and DNS suffix to their rules (a store written before
// these rules still loads).
func (c Cluster) ValidateNew() (warnings []string, err error) {
	warnings, err = c.Validate()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if nerr := CheckClusterName(c.Settings.ClusterName); nerr != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, nerr))
	}
	if serr := CheckDNSSuffix(c.Settings.DNSSuffix); serr != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, serr))
	}
	return warnings, errors.Join(errs...)
}

// CheckVersion accepts the etcd versions we can run: 3.5.x, 3.6.x, 3.7.x.
func CheckVersion(v string) error {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("etcdVersion %q: not a version like 3.6.16 (no leading v)", v)
	}
	if !supportedMinor(m[1]) {
		return fmt.Errorf("etcdVersion %q: etcd %s is not supported; use 3.5.x, 3.6.x or 3.7.x", v, m[1])
	}
	if _, err := strconv.Atoi(m[2]); err != nil {
		return fmt.Errorf("etcdVersion %q: %w", v, err)
	}
	return nil
}

// LoadSpec reads the spec alone (one GET), without the settings: for a
// timer that only needs the declared size or version.
func LoadSpec(ctx context.Context, st store.Store) (etcdmanager.ClusterSpec, error) {
	spec, _, err := loadSpec(ctx, st)
	return spec, err
}

func loadSpec(ctx context.Context, st store.Store) (etcdmanager.ClusterSpec, store.Info, error) {
	sb, info, err := store.GetBytes(ctx, st, etcdmanager.ClusterSpecKey, 1<<16)
	if errors.Is(err, store.ErrNotFound) {
		return etcdmanager.ClusterSpec{}, info, fmt.Errorf("%s: %w", st, ErrNotSeeded)
	}
	if err != nil {
		return etcdmanager.ClusterSpec{}, info, fmt.Errorf("clusterspec: %w", err)
	}
	spec, err := etcdmanager.ParseClusterSpec(sb)
	if err != nil {
		return etcdmanager.ClusterSpec{}, info, fmt.Errorf("%w: %w (%s)", ErrInvalid, err, RepairAdvice)
	}
	return spec, info, nil
}

// Load reads and validates the declaration from the store.
func Load(ctx context.Context, st store.Store) (Cluster, error) {
	c, _, _, err := load(ctx, st)
	return c, err
}

func load(ctx context.Context, st store.Store) (Cluster, string, string, error) {
	var c Cluster
	var sinfo store.Info
	var err error
	if c.Spec, sinfo, err = loadSpec(ctx, st); err != nil {
		return Cluster{}, "", "", err
	}
	gb, ginfo, err := store.GetBytes(ctx, st, SettingsKey, 1<<16)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// A store seeded by etcd-manager: our defaults, a token from its name.
		c.Settings.ClusterToken = "etcd-cluster"
	case err != nil:
		return Cluster{}, "", "", fmt.Errorf("clusterspec: %w", err)
	default:
		dec := json.NewDecoder(bytes.NewReader(gb))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.Settings); err != nil {
			return Cluster{}, "", "", fmt.Errorf("%w: %s: %w (%s)", ErrInvalid, SettingsKey, err, RepairAdvice)
		}
	}
	if err := c.Defaults(); err != nil {
		return Cluster{}, "", "", err
	}
	if _, err := c.Validate(); err != nil {
		return Cluster{}, "", "", fmt.Errorf("%s in %s: %w", etcdmanager.ClusterSpecKey, st, err)
	}
	return c, sinfo.ETag, ginfo.ETag, nil
}

// Seed writes a new declaration. Re-seeding with the same spec is a no-op;
// a different existing spec is kept unless force is set.
func Seed(ctx context.Context, st store.Store, c Cluster, force bool) error {
	if err := c.Defaults(); err != nil {
		return err
	}
	if _, err := c.ValidateNew(); err != nil {
		return err
	}
	old, specTag, setTag, err := load(ctx, st)
	switch {
	case errors.Is(err, ErrNotSeeded):
		// No spec yet, so nothing uses the settings: (re)write them.
		return write(ctx, st, c, store.PutOptions{IfNoneMatch: true}, store.PutOptions{})
	case err != nil && !force:
		return fmt.Errorf("seed: the existing spec cannot be read (%w); pass --force to replace it", err)
	case err != nil:
		// An unreadable spec: keep the token of settings that still parse,
		// so a running cluster keeps its identity.
		if gb, _, gerr := store.GetBytes(ctx, st, SettingsKey, 1<<16); gerr == nil {
			var old Settings
			if json.Unmarshal(gb, &old) == nil && old.ClusterToken != "" {
				c.Settings.ClusterToken = old.ClusterToken
			}
		}
		return write(ctx, st, c, store.PutOptions{}, store.PutOptions{})
	}
	if old.Spec == c.Spec && old.Settings.ClusterName == c.Settings.ClusterName {
		return nil
	}
	if !force {
		return fmt.Errorf("seed: %w (%d members, etcd %s); pass --force to replace it, or use 'etcdadm spec set'", ErrConflict, old.Spec.MemberCount, old.Spec.EtcdVersion)
	}
	c.Settings.ClusterToken = old.Settings.ClusterToken // never change a running cluster's token
	return write(ctx, st, c, casOn(specTag), casOn(setTag))
}

// SetSpec changes member count and/or version (0 / "" keep the current
// value), with a compare-and-swap so concurrent edits cannot be lost.
func SetSpec(ctx context.Context, st store.Store, members int32, version string) (Cluster, []string, error) {
	c, specTag, _, err := load(ctx, st)
	if err != nil {
		return Cluster{}, nil, err
	}
	if members != 0 {
		c.Spec.MemberCount = members
	}
	if version != "" {
		c.Spec.EtcdVersion = version
	}
	warnings, err := c.Validate()
	if err != nil {
		return Cluster{}, warnings, err
	}
	b, err := etcdmanager.MarshalClusterSpec(c.Spec)
	if err != nil {
		return Cluster{}, nil, err
	}
	if _, err := store.PutBytes(ctx, st, etcdmanager.ClusterSpecKey, b, casOn(specTag)); err != nil {
		return Cluster{}, nil, fmt.Errorf("spec set: %w", err)
	}
	return c, warnings, nil
}

func casOn(etag string) store.PutOptions { return store.Since(etag) }

// Settings first: a spec is what makes a store "seeded".
func write(ctx context.Context, st store.Store, c Cluster, specOpts, setOpts store.PutOptions) error {
	gb, err := json.MarshalIndent(c.Settings, "", "  ")
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, SettingsKey, gb, setOpts); err != nil {
		return fmt.Errorf("seed: write %s: %w", SettingsKey, err)
	}
	sb, err := etcdmanager.MarshalClusterSpec(c.Spec)
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, etcdmanager.ClusterSpecKey, sb, specOpts); err != nil {
		return fmt.Errorf("seed: write %s: %w", etcdmanager.ClusterSpecKey, err)
	}
	return nil
}

// SetToken gives the cluster a new initial-cluster token (a cluster
// restore makes a new cluster out of a backup: no old member may join it
// by mistake). Compare-and-swap on the settings.
func SetToken(ctx context.Context, st store.Store, token string) error {
	c, _, setTag, err := load(ctx, st)
	if err != nil {
		return err
	}
	if c.Settings.ClusterToken == token {
		return nil
	}
	c.Settings.ClusterToken = token
	gb, err := json.MarshalIndent(c.Settings, "", "  ")
	if err != nil {
		return err
	}
	if _, err := store.PutBytes(ctx, st, SettingsKey, gb, casOn(setTag)); err != nil {
		return fmt.Errorf("clusterspec: write %s: %w", SettingsKey, err)
	}
	return nil
}
