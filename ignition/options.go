package ignition

import (
	"regexp"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdbin"
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
func butaneVersion(v Variant) (string, bool) {
	switch v {
	case Flatcar:
		return "1.1.0", true
	case FCOS:
		return "1.5.0", true
	}
	return "", false
}

// enablesSysext tells whether a variant's config must enable
// systemd-sysext.service: Flatcar enables it itself, Fedora CoreOS not.
func enablesSysext(v Variant) bool { return v == FCOS }

// Binaries says where the hosts get their programs from.
type Binaries string

const (
	// BinariesURL: Ignition downloads every binary from BinariesBaseURL and
	// checks it against the sha256 in SHA256File.
	BinariesURL Binaries = "url"
	// BinariesBaked: the binaries are already in the image (or bind
	// mounted) at /opt/etcdadm/bin and /opt/etcd/vX.Y.Z; no file entries.
	BinariesBaked Binaries = "baked"
	// BinariesSysext: etcd and etcdadm come as systemd-sysext images
	// (images/sysext/build.sh), our units with them: Ignition downloads
	// the images (BinariesBaseURL, SHA256File) into /opt/extensions/NAME/
	// and links /etc/extensions/NAME.raw to them, or SysextBaked finds
	// them in /etc/extensions already.
	BinariesSysext Binaries = "sysext"
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
	// ManualStoreDir is a master's own store when it is built by hand
	// (etcdadm init / join without --store, render --manual).
	ManualStoreDir = "/var/lib/etcdadm/store"
	ManualStore    = "file://" + ManualStoreDir
	manualCreated  = ManualStoreDir + "/control/etcd-cluster-created"
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

	// Manual renders a master built by hand ('etcdadm init' / 'join'):
	// no shared store (the host's own, ManualStore), none of the
	// automation's units; after init, member join restarts the member at
	// boot on its own data, and certificates are renewed.
	Manual bool

	// BackupInterval is how often the snapshot timer fires (0: the unit's
	// 15 min): minutes that divide an hour, or hours that divide a day, so
	// backups stay on wall-clock marks.
	BackupInterval time.Duration

	Binaries Binaries
	// BinariesBaseURL (url mode) serves bin/<program> for ours and
	// etcd/vX.Y.Z/<program> for etcd's: the layout of images/components'
	// cache, so that directory can be served as it is.
	BinariesBaseURL string
	// SHA256File (url mode) is in sha256sum's format, naming the files by
	// those same relative paths ("<hex>  etcd/v3.6.16/etcd").
	//
	// In sysext mode BinariesBaseURL serves the images and SHA256File is
	// their SHA256SUMS: the directory make images writes, as it is.
	SHA256File string

	// SysextBaked (sysext mode): the images are in the host's image at
	// /etc/extensions/etcdadm.raw and /etc/extensions/etcd-X.Y.raw, for
	// EtcdVersion's minor at least; nothing is downloaded.
	SysextBaked bool
	// SysextEtcdVersions (sysext mode) are further etcd versions to
	// install as images, one a minor besides EtcdVersion's: the version
	// switcher then moves to them without a download.
	SysextEtcdVersions []string
	// SysextEtcdadmVersion (sysext mode) picks the etcdadm image when
	// SHA256File lists several.
	SysextEtcdadmVersion string
	// SysextUpdateURL (sysext mode, downloaded images) is where
	// systemd-sysupdate looks for newer images; "" is BinariesBaseURL.
	SysextUpdateURL string
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
	sysext      *sysextPlan   // sysext mode only
	secret      bool          // credentials came from a file
	enable      []string      // units enabled besides units.Enabled()
	manual      bool          // Options.Manual
	storeDir    string        // a file:// store's directory; "" for S3
	renewEvery  time.Duration // the volume lease's renewal; 0: the unit's 40s
	// pkiRenewEvery: how often etcd-pki-renew.timer checks; 0: the unit's daily.
	pkiRenewEvery time.Duration
	backupCal     string // the snapshot timer's OnCalendar=; "": the unit's
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

// PKIRenewEvery is how often etcd-pki-renew.timer checks certificates of
// lifetime validity: a twelfth of it, so the renewal (due with a third
// left) gets four runs; 0 when the unit's daily schedule already does.
func PKIRenewEvery(validity time.Duration) time.Duration {
	if every := validity / 12; every < 24*time.Hour {
		return every
	}
	return 0
}
