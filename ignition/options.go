package ignition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/store/storeurl"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/units"
)

// Variant is the OS a config is for.
type Variant string

// The variants we render, each with the Butane spec version used and the
// Ignition spec version it produces.
const (
	Flatcar Variant = "flatcar" // Butane flatcar 1.1.0 -> Ignition 3.4.0
	FCOS    Variant = "fcos"    // Butane fcos 1.5.0 -> Ignition 3.4.0
)

// butaneVersion is the Butane spec version per variant (full semver:
// Butane refuses "1.1").
var butaneVersion = map[Variant]string{Flatcar: "1.1.0", FCOS: "1.5.0"}

// Binaries says where the hosts get their programs from.
type Binaries string

const (
	// BinariesURL: Ignition downloads every binary from BinariesBaseURL and
	// checks it against the sha256 in SHA256File.
	BinariesURL Binaries = "url"
	// BinariesBaked: the binaries are already in the image (or bind
	// mounted) at /opt/etcdadm/bin and /opt/etcd/vX.Y.Z; no file entries.
	BinariesBaked Binaries = "baked"
)

// Host paths the config writes. The units name the same paths.
const (
	EnvFile         = "/etc/etcdadm/etcdadm.env"
	HostEnvFile     = "/etc/etcdadm/host.env"
	CredentialsFile = "/etc/etcdadm/s3-credentials"
	SysusersFile    = "/etc/sysusers.d/etcd.conf"
	TmpfilesFile    = "/etc/tmpfiles.d/etcdadm.conf"
	BinDir          = "/opt/etcdadm/bin"
	EtcdDir         = "/opt/etcd"
	EtcdCurrent     = "/opt/etcd/current"
)

// programs are our binaries in BinDir (every one a unit runs);
// etcdPrograms are upstream's, in EtcdDir/vX.Y.Z.
func programs() []string     { return units.Programs() }
func etcdPrograms() []string { return etcdbin.Programs() }

// Options are everything one rendered config depends on. Render reads the
// two files it names (credentials, sums) and nothing else: it never
// contacts the store or the binaries' server.
type Options struct {
	Variant Variant
	// Store is the shared store URL (ETCDADM_STORE), checked with
	// storeurl's rules; it must not carry credentials.
	Store string
	// EtcdVersion, like 3.6.16: /opt/etcd/current links to it.
	EtcdVersion string
	// LogLevel for the units (ETCDADM_LOG_LEVEL); "" means info.
	LogLevel string
	// Env holds further ETCDADM_* settings for etcdadm.env (shared, not
	// secret), e.g. ETCDADM_FOUND_GRACE=2m.
	Env map[string]string

	// S3CredentialsFile is an AWS shared-credentials file, copied into
	// /etc/etcdadm/s3-credentials (0600, root). Required for s3:// stores;
	// for file:// stores an empty name gives a comment-only file, since the
	// units' LoadCredential= needs the file to exist.
	S3CredentialsFile string

	// Per host (all optional; any of them makes /etc/etcdadm/host.env).
	// Without Name the config serves every master: member-join then takes
	// the name from the hostname (or etcd-volume-attach's identity.env).
	Name string   // ETCDADM_MEMBER_NAME
	Host string   // ETCDADM_HOST: how peers reach this host
	IPs  []string // ETCDADM_IPS: this host's addresses (certificate SANs)

	// EnableUnits are embedded units to enable besides units.Enabled(),
	// e.g. etcd-dns-registrar.service for a cluster with a DNS suffix.
	EnableUnits []string

	Binaries Binaries
	// BinariesBaseURL (url mode) serves bin/<program> for ours and
	// etcd/vX.Y.Z/<program> for etcd's: the layout of images/components'
	// cache, so that directory can be served as it is.
	BinariesBaseURL string
	// SHA256File (url mode) is in sha256sum's format, naming the files by
	// those same relative paths ("<hex>  etcd/v3.6.16/etcd").
	SHA256File string
}

// OutputName is the base name for the .bu and .ign files: the member name,
// or "master" for a config every master shares.
func (o Options) OutputName() string {
	if o.Name != "" {
		return o.Name
	}
	return "master"
}

// plan is Options checked and resolved: what the Butane config says.
type plan struct {
	variant     Variant
	version     string
	name        string
	etcdVersion string
	env         []envVar // etcdadm.env
	hostEnv     []envVar // host.env; empty: no file
	credentials string
	downloads   []download    // url mode only
	secret      bool          // credentials came from a file
	enable      []string      // units enabled besides units.Enabled()
	renewEvery  time.Duration // the volume lease's renewal; 0: the unit's 40s
}

type envVar struct{ key, value string }

type download struct {
	path, url, sha256 string
}

var (
	hostRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)
	envKeyRE = regexp.MustCompile(`^ETCDADM_[A-Z0-9_]+$`)
	hexRE    = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

	defaultProfileRE = regexp.MustCompile(`(?m)^[ \t]*\[[ \t]*default[ \t]*\]`)
)

// reservedEnv are set by their own option; Env may not set them.
var reservedEnv = map[string]string{
	"ETCDADM_STORE":       "--store",
	"ETCDADM_LOG_LEVEL":   "--host-log-level",
	"ETCDADM_MEMBER_NAME": "--name (it is per host: host.env)",
	"ETCDADM_HOST":        "--host (it is per host: host.env)",
	"ETCDADM_IPS":         "--ip (it is per host: host.env)",
}

// resolve checks every option, collecting all problems so the operator
// fixes them in one go.
func (o Options) resolve() (plan, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	p := plan{variant: o.Variant, name: o.OutputName(), etcdVersion: o.EtcdVersion, enable: o.EnableUnits}

	var ok bool
	if p.version, ok = butaneVersion[o.Variant]; !ok {
		bad("variant %q: use --variant flatcar or --variant fcos", o.Variant)
	}
	if o.EtcdVersion == "" {
		bad("no etcd version: pass --etcd-version, e.g. 3.6.16 (the version the cluster spec names)")
	} else if err := clusterspec.CheckVersion(o.EtcdVersion); err != nil {
		bad("--etcd-version: %w", err)
	}

	kind, err := checkStore(o.Store)
	if err != nil {
		errs = append(errs, err)
	}
	p.env = append(p.env, envVar{"ETCDADM_STORE", o.Store})

	level := o.LogLevel
	if level == "" {
		level = "info"
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		bad("--host-log-level %q: use debug, info, warn or error", level)
	}
	p.env = append(p.env, envVar{"ETCDADM_LOG_LEVEL", level})

	extra := make([]string, 0, len(o.Env))
	for k := range o.Env {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		v := o.Env[k]
		switch {
		case reservedEnv[k] != "":
			bad("--env %s: set it with %s", k, reservedEnv[k])
		case !envKeyRE.MatchString(k):
			bad("--env %s: only ETCDADM_* settings belong in etcdadm.env (S3 credentials go in --s3-credentials-file)", k)
		case checkEnvValue(v) != nil:
			bad("--env %s: %w", k, checkEnvValue(v))
		case k == "ETCDADM_VOLUME_LEASE":
			// etcd-volume-renew.timer renews at a third of the lease.
			lease, err := time.ParseDuration(v)
			if err != nil || lease < 10*time.Second {
				bad("--env %s=%s: a duration of at least 10s, e.g. 2m", k, v)
				break
			}
			if lease != volume.DefaultLease {
				p.renewEvery = volume.RenewEvery(lease)
			}
			p.env = append(p.env, envVar{k, v})
		default:
			p.env = append(p.env, envVar{k, v})
		}
	}

	if o.Name != "" {
		if !pki.IsDNSLabel(o.Name) {
			bad("--name %q: a member name is a DNS label: lowercase letters, digits and '-', at most 63, e.g. etcd-a", o.Name)
		}
		p.hostEnv = append(p.hostEnv, envVar{"ETCDADM_MEMBER_NAME", o.Name})
	}
	if o.Host != "" {
		if net.ParseIP(o.Host) == nil && !hostRE.MatchString(o.Host) {
			bad("--host %q: an IP address or a DNS name", o.Host)
		}
		p.hostEnv = append(p.hostEnv, envVar{"ETCDADM_HOST", o.Host})
	}
	if len(o.IPs) > 0 {
		ips := make([]string, 0, len(o.IPs))
		for _, s := range o.IPs {
			ip := net.ParseIP(strings.TrimSpace(s))
			if ip == nil {
				bad("--ip %q: not an IP address", s)
				continue
			}
			ips = append(ips, ip.String())
		}
		p.hostEnv = append(p.hostEnv, envVar{"ETCDADM_IPS", strings.Join(ips, ",")})
	}

	p.credentials, err = credentials(o.S3CredentialsFile, kind)
	p.secret = o.S3CredentialsFile != ""
	if err != nil {
		errs = append(errs, err)
	}

	switch o.Binaries {
	case BinariesURL:
		if o.BinariesBaseURL == "" || o.SHA256File == "" {
			bad("--binaries url needs --binaries-base-url URL and --sha256-file SUMS")
			break
		}
		if o.EtcdVersion == "" || clusterspec.CheckVersion(o.EtcdVersion) != nil {
			break // reported above; the etcd paths depend on it
		}
		d, err := downloads(o.BinariesBaseURL, o.SHA256File, o.EtcdVersion)
		if err != nil {
			errs = append(errs, err)
		}
		p.downloads = d
	case BinariesBaked:
		if o.BinariesBaseURL != "" || o.SHA256File != "" {
			bad("--binaries baked downloads nothing: drop --binaries-base-url and --sha256-file, or use --binaries url")
		}
	default:
		bad("binaries %q: pass --binaries url (Ignition downloads them, with --binaries-base-url and --sha256-file) or --binaries baked (already in the image)", o.Binaries)
	}

	if len(errs) > 0 {
		return plan{}, fmt.Errorf("%w:\n  %w", ErrInvalid, joinIndented(errs))
	}
	return p, nil
}

// checkStore parses the store URL by storeurl's rules without opening it:
// a file:// directory exists on the hosts, not necessarily here, and an S3
// store is checked with placeholder credentials (minio contacts nothing
// until the first request). kind is "file" or "s3" for a good URL.
func checkStore(raw string) (kind string, err error) {
	if raw == "" {
		return "", fmt.Errorf("no store: pass --store file:///path or --store s3://BUCKET/PREFIX")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--store %q: %w; expected %s", raw, err, storeurl.Help)
	}
	switch u.Scheme {
	case "file":
		switch {
		case u.Host != "" && u.Host != "localhost":
			return "", fmt.Errorf("--store %q: file URLs need three slashes (file:///path)", raw)
		case u.Opaque != "" || !strings.HasPrefix(u.Path, "/") || u.Path == "/":
			return "", fmt.Errorf("--store %q: name an absolute directory, e.g. file:///var/lib/etcdadm/store", raw)
		case u.RawQuery != "" || u.Fragment != "":
			return "", fmt.Errorf("--store %q: file URLs take no query or fragment", raw)
		}
		return "file", checkEnvValue(raw)
	case "s3":
		// ca-file names a file on the hosts: not ours to read here.
		q := u.Query()
		q.Del("ca-file")
		v := *u
		v.RawQuery = q.Encode()
		placeholder := func(k string) string {
			if k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY" {
				return "placeholder"
			}
			return ""
		}
		if _, err := storeurl.Open(context.Background(), v.String(), placeholder); err != nil {
			return "", fmt.Errorf("--store: %w", err)
		}
		return "s3", checkEnvValue(raw)
	default:
		return "", fmt.Errorf("--store %q: unsupported scheme %q; expected %s", raw, u.Scheme, storeurl.Help)
	}
}

func credentials(path, storeKind string) (string, error) {
	if path == "" {
		switch storeKind {
		case "file":
			return "# No S3 credentials: the store is a file:// directory. The units load this\n" +
				"# file with LoadCredential=aws:" + CredentialsFile + ", so it must exist.\n", nil
		case "":
			return "", nil // the store URL is wrong: that error says enough
		}
		return "", fmt.Errorf("an s3:// store needs credentials: pass --s3-credentials-file PATH (an AWS shared-credentials file with aws_access_key_id and aws_secret_access_key)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--s3-credentials-file: %w", err)
	}
	switch {
	case !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0:
		return "", fmt.Errorf("--s3-credentials-file %s: not a text file; expected an AWS shared-credentials file", path)
	case !bytes.Contains(bytes.ToLower(b), []byte("aws_access_key_id")):
		return "", fmt.Errorf("--s3-credentials-file %s: no aws_access_key_id; expected an AWS shared-credentials file:\n    [default]\n    aws_access_key_id = ...\n    aws_secret_access_key = ...", path)
	case !defaultProfileRE.Match(b):
		// The units set no AWS_PROFILE, so the store reads [default].
		return "", fmt.Errorf("--s3-credentials-file %s: no [default] profile; the hosts read that one (rename the section to [default])", path)
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	return string(b), nil
}

func downloads(base, sumsFile, etcdVersion string) ([]download, error) {
	u, err := url.Parse(base)
	switch {
	case err != nil:
		return nil, fmt.Errorf("--binaries-base-url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("--binaries-base-url %q: expected http(s)://host[:port]/path", base)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, fmt.Errorf("--binaries-base-url %q: no query, fragment or credentials: the file paths are appended to it", base)
	}
	raw, err := os.ReadFile(sumsFile)
	if err != nil {
		return nil, fmt.Errorf("--sha256-file: %w", err)
	}
	sums, err := parseSums(raw)
	if err != nil {
		return nil, fmt.Errorf("--sha256-file %s: %w", sumsFile, err)
	}
	base = strings.TrimSuffix(base, "/")
	etcdRel := "etcd/v" + etcdVersion
	var want []download
	for _, p := range programs() {
		want = append(want, download{path: BinDir + "/" + p, url: "bin/" + p})
	}
	for _, p := range etcdPrograms() {
		want = append(want, download{path: EtcdDir + "/v" + etcdVersion + "/" + p, url: etcdRel + "/" + p})
	}
	var missing []string
	for i, d := range want {
		h, ok := sums[d.url]
		if !ok {
			missing = append(missing, d.url)
			continue
		}
		want[i].sha256 = h
		want[i].url = base + "/" + d.url
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("--sha256-file %s: no sha256 for %s; refusing to render downloads Ignition cannot verify (write the file with: cd DIR && sha256sum bin/%s %s/*)",
			sumsFile, strings.Join(missing, ", "), strings.Join(programs(), " bin/"), etcdRel)
	}
	return want, nil
}

// parseSums reads sha256sum output: "<64 hex>  <path>" or "<hex> *<path>"
// (binary mode); blank lines and # comments are skipped.
func parseSums(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		if !ok || !hexRE.MatchString(sum) {
			return nil, fmt.Errorf("line %d: expected \"<64 hex digits>  <path>\" (sha256sum's format), got %q", i+1, line)
		}
		name = strings.TrimPrefix(strings.TrimPrefix(name, " "), "*")
		name = strings.TrimPrefix(name, "./")
		sum = strings.ToLower(sum)
		if old, dup := out[name]; dup && old != sum {
			return nil, fmt.Errorf("line %d: %s listed twice with different hashes", i+1, name)
		}
		out[name] = sum
	}
	return out, nil
}

// checkEnvValue refuses what an environment file cannot carry.
func checkEnvValue(v string) error {
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("value %q holds a control character (newline?)", v)
		}
	}
	return nil
}

func joinIndented(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}
