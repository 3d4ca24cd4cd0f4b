package ignition

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/etcdadm/etcdadm-immutable/internal/envfile"
	"github.com/etcdadm/etcdadm-immutable/units"
)

// The part of the Butane schema we write (base v0_5: flatcar 1.1.0 and
// fcos 1.5.0). Marshalled rather than templated, so YAML quoting and block
// scalars are the encoder's job, not ours.
type butaneConfig struct {
	Variant Variant `yaml:"variant"`
	Version string  `yaml:"version"`
	Storage storage `yaml:"storage"`
	Systemd systemd `yaml:"systemd"`
}

type storage struct {
	Directories []directory `yaml:"directories,omitempty"`
	Files       []file      `yaml:"files,omitempty"`
	Links       []link      `yaml:"links,omitempty"`
}

type directory struct {
	Path string `yaml:"path"`
	Mode mode   `yaml:"mode"`
}

type file struct {
	Path      string   `yaml:"path"`
	Mode      mode     `yaml:"mode"`
	User      *nodeID  `yaml:"user,omitempty"`
	Group     *nodeID  `yaml:"group,omitempty"`
	Overwrite bool     `yaml:"overwrite"`
	Contents  resource `yaml:"contents"`
}

type nodeID struct {
	ID int `yaml:"id"`
}

type resource struct {
	Inline       string        `yaml:"inline,omitempty"`
	Source       string        `yaml:"source,omitempty"`
	Verification *verification `yaml:"verification,omitempty"`
}

type verification struct {
	Hash string `yaml:"hash"`
}

type link struct {
	Path      string `yaml:"path"`
	Target    string `yaml:"target"`
	Hard      bool   `yaml:"hard"`
	Overwrite bool   `yaml:"overwrite"`
}

type systemd struct {
	Units []unit `yaml:"units"`
}

type unit struct {
	Name    string `yaml:"name"`
	Enabled *bool  `yaml:"enabled,omitempty"`
	// Contents "" writes no unit file: a unit with drop-ins only (an
	// empty contents: would mask the real one with an empty file).
	Contents string   `yaml:"contents,omitempty"`
	Dropins  []dropin `yaml:"dropins,omitempty"`
}

type dropin struct {
	Name     string `yaml:"name"`
	Contents string `yaml:"contents"`
}

// mode is a file mode, written in octal as people read modes (0644).
type mode int

func (m mode) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprintf("0%o", int(m))}, nil
}

// root is the root user or group, for a file's owner.
func root() *nodeID { return &nodeID{ID: 0} }

// sysusers creates the etcd user and group: Ignition cannot add users to
// a running system, systemd-sysusers can (before systemd-tmpfiles-setup).
const sysusers = `# The etcd system user and group (etcdadm): etcd.service and the snapshot
# uploader run as etcd; it owns the keys in /etc/etcd/pki and the data.
u etcd - "etcd (etcdadm)" /var/lib/etcd -
`

// tmpfiles makes the directories the units' ReadWritePaths= name: systemd
// refuses to start a unit whose ReadWritePaths= entry is missing.
const tmpfiles = `# Directories of etcdadm's units (etcdadm render).
d /etc/etcd      0755 root root -
d /etc/etcd/pki  0700 etcd etcd -
d /var/lib/etcd  0700 etcd etcd -
d /run/etcdadm   0755 root root -
`

// tmpfiles is the tmpfiles.d file: with a file:// store, its directory
// too, root's only (it holds the CA key; a shared directory mounted there
// later keeps its own modes).
func (p plan) tmpfiles() string {
	if p.storeDir == "" {
		return tmpfiles
	}
	return tmpfiles + "d " + p.storeDir + " 0700 root root -\n"
}

// butane builds the Butane config for p.
func (p plan) butane() ([]byte, error) {
	c := butaneConfig{Variant: p.variant, Version: p.version}
	st := &c.Storage

	st.Directories = append(st.Directories, directory{Path: "/etc/etcdadm", Mode: 0o755})
	if len(p.downloads) > 0 {
		st.Directories = append(st.Directories,
			directory{Path: "/opt/etcdadm", Mode: 0o755},
			directory{Path: BinDir, Mode: 0o755})
	}
	st.Directories = append(st.Directories, directory{Path: EtcdDir, Mode: 0o755})
	if len(p.downloads) > 0 {
		st.Directories = append(st.Directories, directory{Path: EtcdDir + "/v" + p.etcdVersion, Mode: 0o755})
	}

	st.Files = append(st.Files, inlineFile(EnvFile, 0o644,
		envFile("Settings every master shares (etcdadm render). No secrets here: S3\n# credentials are in "+CredentialsFile+" (LoadCredential=).", p.env)))
	if len(p.hostEnv) > 0 {
		st.Files = append(st.Files, inlineFile(HostEnvFile, 0o644,
			envFile("This host's own settings (etcdadm render --name/--host/--ip).", p.hostEnv)))
	}
	cred := inlineFile(CredentialsFile, 0o600, p.credentials)
	cred.User, cred.Group = root(), root()
	st.Files = append(st.Files, cred,
		inlineFile(SysusersFile, 0o644, sysusers),
		inlineFile(TmpfilesFile, 0o644, p.tmpfiles()))
	for _, d := range p.downloads {
		st.Files = append(st.Files, remoteFile(d, 0o755))
	}
	// Relative, so the link also resolves under a root prefix (ignition-apply
	// --root, tests); on the host it is /opt/etcd/current -> /opt/etcd/vX.Y.Z.
	st.Links = append(st.Links, link{Path: EtcdCurrent, Target: "v" + p.etcdVersion, Hard: false, Overwrite: true})
	if p.sysext != nil {
		p.sysext.storage(st)
	}

	enabled, err := p.enabledUnits()
	if err != nil {
		return nil, err
	}
	if p.sysext != nil {
		c.Systemd.Units, err = p.sysextUnits(enabled)
	} else {
		c.Systemd.Units, err = p.embeddedUnits(enabled)
	}
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# etcdadm render: Butane config for %s (%s %s -> Ignition %s).\n", p.name, p.variant, p.version, ignitionVersion)
	if p.secret {
		fmt.Fprintf(&buf, "# It holds the S3 credentials: keep it as private as they are.\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("ignition: encode butane: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("ignition: encode butane: %w", err)
	}
	return buf.Bytes(), nil
}

// enabledUnits are the embedded units this config enables.
func (p plan) enabledUnits() ([]string, error) {
	on := units.Enabled()
	if p.manual {
		on = units.ManualEnabled()
	}
	names := units.Names()
	var out, unknown []string
	for _, n := range append(slices.Clone(on), p.enable...) {
		switch {
		case !slices.Contains(names, n):
			if !slices.Contains(unknown, n) {
				unknown = append(unknown, n)
			}
		case !slices.Contains(out, n):
			out = append(out, n)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("%w: units to enable %v are not embedded units (see units/)", ErrInvalid, unknown)
	}
	return out, nil
}

// embeddedUnits writes every embedded unit, enabled or not.
func (p plan) embeddedUnits(enabled []string) ([]unit, error) {
	var out []unit
	for _, n := range units.Names() {
		b, err := units.Read(n)
		if err != nil {
			return nil, fmt.Errorf("ignition: unit %s: %w", n, err)
		}
		// Enabled false is said explicitly, though Ignition writes a
		// "disable" preset only for a unit already enabled: the
		// distribution's default preset ("disable *" on Flatcar and Fedora
		// CoreOS) keeps it off.
		on := slices.Contains(enabled, n)
		out = append(out, unit{Name: n, Contents: string(b), Enabled: &on, Dropins: p.dropins(n)})
	}
	return out, nil
}

// dropins are what this config changes in embedded unit n.
func (p plan) dropins(n string) []dropin {
	var out []dropin
	switch {
	case n == "etcd-volume-renew.timer" && p.renewEvery > 0:
		every := p.renewEvery.String()
		out = append(out, dropin{Name: "10-lease.conf", Contents: "# ETCDADM_VOLUME_LEASE is not the default 2m: renew at a third of it (etcdadm render).\n# One empty assignment resets every timer of the unit, so it comes once.\n[Timer]\nOnActiveSec=\nOnActiveSec=" + every + "\nOnUnitActiveSec=" + every + "\n"})
	case n == "etcd-pki-renew.timer" && p.pkiRenewEvery > 0:
		every := p.pkiRenewEvery.String()
		out = append(out, dropin{Name: "10-validity.conf", Contents: "# ETCDADM_CERT_VALIDITY is short: check every twelfth of it (etcdadm render), so\n# the renewal, due at a third left, gets four runs. One empty assignment\n# resets the unit's own schedule.\n[Timer]\nOnCalendar=\nOnActiveSec=" + every + "\nOnUnitActiveSec=" + every + "\nRandomizedDelaySec=" + (p.pkiRenewEvery / 4).String() + "\n"})
	case n == "etcd-snapshot-uploader.timer" && p.backupCal != "":
		out = append(out, dropin{Name: "10-interval.conf", Contents: "# etcdadm render --backup-interval.\n# One empty assignment resets the unit's own schedule.\n[Timer]\nOnCalendar=\nOnCalendar=" + p.backupCal + "\n"})
	case n == "etcd-member-join.service" && p.manual:
		out = append(out, dropin{Name: "10-manual.conf", Contents: "# etcdadm render --manual: runs at boot once 'etcdadm init' or 'etcdadm join' made\n# this host a member (etcd comes back on its own data); the store is the host's.\n[Unit]\nConditionPathExists=" + manualCreated + "\n"})
	}
	if p.storeDir != "" && units.ReadsStore(n) {
		out = append(out, p.storeDropin(n))
	}
	return out
}

// storeDropin lets unit n write a file:// store: its temp files and its
// lock live in the store's directory, which ProtectSystem=strict makes
// read-only otherwise. The store belongs to root (0700, objects 0600), so
// the snapshot uploader, the etcd user's elsewhere, runs as root without
// capabilities here and reads etcd's client certificate as credentials
// (/etc/etcd/pki is the etcd user's own).
func (p plan) storeDropin(n string) dropin {
	c := "# etcdadm render: the store is the directory " + p.storeDir + " (file://);\n# the unit writes its objects, temp files and lock there.\n[Service]\nReadWritePaths=" + p.storeDir + "\n"
	if n == "etcd-snapshot-uploader.service" {
		c += "# The store is root's (0700): the uploader runs as root, without capabilities,\n# and reads etcd's client certificate as credentials.\n" +
			"User=root\nGroup=root\n" +
			"LoadCredential=etcd-client.crt:/etc/etcd/pki/client.crt\n" +
			"LoadCredential=etcd-client.key:/etc/etcd/pki/client.key\n" +
			"LoadCredential=etcd-ca.crt:/etc/etcd/pki/ca.crt\n" +
			"Environment=ETCDADM_CERT=%d/etcd-client.crt ETCDADM_KEY=%d/etcd-client.key ETCDADM_CACERT=%d/etcd-ca.crt\n"
	}
	return dropin{Name: "10-store.conf", Contents: c}
}

// remoteFile is a file Ignition downloads and checks.
func remoteFile(d download, m mode) file {
	return file{Path: d.path, Mode: m, Overwrite: true, Contents: resource{Source: d.url, Verification: &verification{Hash: "sha256-" + d.sha256}}}
}

func inlineFile(path string, m mode, contents string) file {
	return file{Path: path, Mode: m, Overwrite: true, Contents: resource{Inline: contents}}
}

// envFile formats systemd EnvironmentFile= lines (also fine for a shell's
// "."): values outside a safe set are double-quoted, with \ " ` $ escaped.
func envFile(comment string, vars []envVar) string {
	var b strings.Builder
	b.WriteString("# " + comment + "\n")
	for _, v := range vars {
		b.WriteString(envfile.Line(v.key, v.value))
	}
	return b.String()
}
