package ignition

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/pki"
	"github.com/etcdadm/etcdadm-immutable/internal/volume"
	"github.com/etcdadm/etcdadm-immutable/internal/volumeflags"
)

// resolve checks every option, collecting all problems so the operator
// fixes them in one go.
func (o Options) resolve() (plan, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	p := plan{variant: o.Variant, name: o.OutputName(), etcdVersion: o.EtcdVersion, enable: o.EnableUnits}

	var ok bool
	if p.version, ok = butaneVersion(o.Variant); !ok {
		bad("variant %q: use --variant flatcar or --variant fcos", o.Variant)
	}
	if o.BackupInterval != 0 {
		var err error
		if p.backupCal, err = BackupCalendar(o.BackupInterval); err != nil {
			bad("--backup-interval: %w", err)
		}
	}
	if o.EtcdVersion == "" {
		bad("no etcd version: pass --etcd-version, e.g. 3.6.16 (the version the cluster spec names)")
	} else if err := clusterspec.CheckVersion(o.EtcdVersion); err != nil {
		bad("--etcd-version: %w", err)
	}

	store := o.Store
	if p.manual = o.Manual; o.Manual {
		if o.Store != "" || len(o.EnableUnits) > 0 {
			bad("--manual keeps the cluster's state on each host (%s) and enables no automation: drop --store and --enable, or drop --manual", ManualStore)
		}
		store = ManualStore
	}
	kind, err := checkStore(store)
	if err != nil {
		errs = append(errs, err)
	}
	if kind == "file" {
		u, _ := url.Parse(store)
		p.storeDir = path.Clean(u.Path)
	}
	p.env = append(p.env, envVar{"ETCDADM_STORE", store})

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
		case reservedEnv(k) != "":
			bad("--env %s: set it with %s", k, reservedEnv(k))
		case !envKeyRE.MatchString(k):
			bad("--env %s: only ETCDADM_* settings belong in etcdadm.env (S3 credentials go in --s3-credentials-file)", k)
		case checkEnvValue(v) != nil:
			bad("--env %s: %w", k, checkEnvValue(v))
		case k == "ETCDADM_VOLUME_LEASE":
			// etcd-volume-renew.timer renews at a third of the lease.
			lease, err := time.ParseDuration(v)
			if err != nil {
				bad("--env %s=%s: a duration such as 2m", k, v)
				break
			}
			if err := volumeflags.CheckLease(lease); err != nil {
				bad("--env %s=%s: %w", k, v, err)
				break
			}
			if lease != volume.DefaultLease {
				p.renewEvery = volume.RenewEvery(lease)
			}
			p.env = append(p.env, envVar{k, v})
		case k == "ETCDADM_CERT_VALIDITY":
			d, err := time.ParseDuration(v)
			if err == nil {
				err = pki.CheckLeafValidity(d)
			}
			if err != nil {
				bad("--env %s=%s: %w", k, v, err)
				break
			}
			p.pkiRenewEvery = PKIRenewEvery(d)
			p.env = append(p.env, envVar{k, v})
		default:
			p.env = append(p.env, envVar{k, v})
		}
	}

	if o.Name != "" {
		if err := pki.CheckMemberName(o.Name); err != nil {
			bad("--name: %w, e.g. etcd-a", err)
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

	etcdOK := o.EtcdVersion != "" && clusterspec.CheckVersion(o.EtcdVersion) == nil
	if o.Binaries != BinariesSysext && (o.SysextBaked || len(o.SysextEtcdVersions) > 0 || o.SysextEtcdadmVersion != "" || o.SysextUpdateURL != "") {
		bad("--sysext-baked, --sysext-etcd-version, --sysext-etcdadm-version and --sysext-update-url are for --binaries sysext")
	}
	switch o.Binaries {
	case BinariesURL:
		if o.BinariesBaseURL == "" || o.SHA256File == "" {
			bad("--binaries url needs --binaries-base-url URL and --sha256-file SUMS")
			break
		}
		if !etcdOK {
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
	case BinariesSysext:
		var serrs []error
		p.sysext, serrs = o.resolveSysext(etcdOK)
		errs = append(errs, serrs...)
		if p.sysext != nil && len(p.sysext.images) > 0 {
			// Downloaded images are kept current (etcdadm sysupdate).
			p.enable = append(p.enable, "etcd-sysupdate.timer")
		}
	default:
		bad("binaries %q: pass --binaries url (Ignition downloads them, with --binaries-base-url and --sha256-file), --binaries baked (already in the image) or --binaries sysext (as systemd-sysext images)", o.Binaries)
	}

	if len(errs) > 0 {
		return plan{}, fmt.Errorf("%w:\n  %w", ErrInvalid, joinIndented(errs))
	}
	return p, nil
}

func joinIndented(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

// BackupCalendar turns a backup interval into the snapshot timer's
// OnCalendar= expression: minutes that divide an hour (*:0/15), or hours
// that divide a day (0/6:00), so every master's timer fires at the same
// wall-clock marks and the leader takes one backup a mark.
func BackupCalendar(d time.Duration) (string, error) {
	switch {
	case d >= time.Minute && d < time.Hour && d%time.Minute == 0 && (time.Hour%d) == 0:
		return fmt.Sprintf("*:0/%d", int(d/time.Minute)), nil
	case d >= time.Hour && d <= 24*time.Hour && d%time.Hour == 0 && (24*time.Hour%d) == 0:
		return fmt.Sprintf("0/%d:00", int(d/time.Hour)), nil
	}
	return "", fmt.Errorf("%v: use minutes that divide an hour (1m, 5m, 10m, 15m, 20m, 30m) or hours that divide a day (1h, 2h, 3h, 4h, 6h, 8h, 12h, 24h)", d)
}
