package ignition

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/etcdadm/etcdadm-immutable/internal/clusterspec"
	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/sysext"
	"github.com/etcdadm/etcdadm-immutable/units"
)

// The sysext mode's own unit and drop-ins.
const (
	// sysextTarget starts the enabled units of the etcdadm image;
	// sysextStarter starts it once the images are merged.
	sysextTarget  = "etcdadm-sysext.target"
	sysextStarter = "etcdadm-sysext.service"
	sysextDropin  = "10-etcdadm-sysext.conf"
)

// sysextPlan is what --binaries sysext adds: the images to download, or
// none when they are baked into /etc/extensions.
type sysextPlan struct {
	images []sysextImage
	// url serves newer images and their SHA256SUMS: sysupdate's source.
	url string
}

type sysextImage struct {
	sysext.Image
	download // the image file: Path() from url, checked against sha256
}

// resolveSysext checks the sysext options. etcdOK says EtcdVersion is
// good (its problems are reported already).
func (o Options) resolveSysext(etcdOK bool) (*sysextPlan, []error) {
	if o.SysextBaked {
		if o.BinariesBaseURL != "" || o.SHA256File != "" || len(o.SysextEtcdVersions) > 0 || o.SysextEtcdadmVersion != "" || o.SysextUpdateURL != "" {
			return nil, []error{errors.New("--sysext-baked downloads nothing, and the OS image's updates bring newer images: drop --binaries-base-url, --sha256-file, --sysext-etcd-version, --sysext-etcdadm-version and --sysext-update-url, or drop --sysext-baked")}
		}
		return &sysextPlan{}, nil
	}
	if o.BinariesBaseURL == "" || o.SHA256File == "" {
		return nil, []error{errors.New("--binaries sysext needs --binaries-base-url URL and --sha256-file SUMS (the directory make images writes, served over http(s), and its SHA256SUMS), or --sysext-baked when the images are in /etc/extensions already")}
	}
	versions, errs := o.sysextEtcdVersions(etcdOK)
	base, err := checkBaseURL("--binaries-base-url", o.BinariesBaseURL)
	if err != nil {
		return nil, append(errs, err)
	}
	updates := base
	if o.SysextUpdateURL != "" {
		if updates, err = checkBaseURL("--sysext-update-url", o.SysextUpdateURL); err != nil {
			return nil, append(errs, err)
		}
	}
	sums, err := readSums(o.SHA256File)
	if err != nil {
		return nil, append(errs, err)
	}
	adm, err := etcdadmImage(sums, o.SysextEtcdadmVersion, o.SHA256File)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	imgs := []sysext.Image{}
	for _, v := range versions {
		imgs = append(imgs, sysext.Etcd(v))
	}
	images, err := sysextDownloads(base, sums, append(imgs, adm))
	if err != nil {
		return nil, []error{fmt.Errorf("--sha256-file %s: %w (build them: ETCD_VERSIONS=%q bash images/sysext/build.sh DIR writes the images and DIR/SHA256SUMS)", o.SHA256File, err, versionList(versions))}
	}
	return &sysextPlan{images: images, url: updates}, nil
}

// sysextDownloads are imgs from base, each with its hash in sums.
func sysextDownloads(base string, sums map[string]string, imgs []sysext.Image) ([]sysextImage, error) {
	var files []string
	for _, img := range imgs {
		files = append(files, img.File)
	}
	hashes, missing := lookupSums(sums, files)
	if len(missing) > 0 {
		return nil, fmt.Errorf("no sha256 for %s; refusing to render downloads Ignition cannot verify", strings.Join(missing, ", "))
	}
	var out []sysextImage
	for i, img := range imgs {
		out = append(out, sysextImage{Image: img, download: download{path: img.Path(), url: base + "/" + img.File, sha256: hashes[i]}})
	}
	return out, nil
}

// sysextEtcdVersions are the etcd images to install: EtcdVersion's and
// SysextEtcdVersions, one a minor (they are activated as etcd-X.Y).
func (o Options) sysextEtcdVersions(etcdOK bool) ([]etcdversion.Version, []error) {
	var out []etcdversion.Version
	var errs []error
	by := map[string]string{} // minor -> the option that named it
	add := func(flag, s string) {
		v, err := etcdversion.Parse(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
			return
		}
		if first, taken := by[v.MinorString()]; taken {
			errs = append(errs, fmt.Errorf("%s %s: etcd %s comes from %s already; one image a minor can be active (%s)", flag, s, v.MinorString(), first, sysext.Etcd(v).Link()))
			return
		}
		by[v.MinorString()] = flag + " " + s
		out = append(out, v)
	}
	if etcdOK {
		add("--etcd-version", o.EtcdVersion)
	}
	for _, s := range o.SysextEtcdVersions {
		if err := clusterspec.CheckVersion(s); err != nil {
			errs = append(errs, fmt.Errorf("--sysext-etcd-version: %w", err))
			continue
		}
		add("--sysext-etcd-version", s)
	}
	return out, errs
}

// etcdadmImage is the etcdadm image the hosts get: the one sums lists, or
// the version asked for when it lists several.
func etcdadmImage(sums map[string]string, version, sumsFile string) (sysext.Image, error) {
	if version != "" {
		return sysext.Etcdadm(version), nil
	}
	var found []string
	for name := range sums {
		if v, ok := sysext.EtcdadmVersion(name); ok {
			found = append(found, v)
		}
	}
	slices.Sort(found)
	switch len(found) {
	case 1:
		return sysext.Etcdadm(found[0]), nil
	case 0:
		return sysext.Image{}, fmt.Errorf("--sha256-file %s names no etcdadm image (%s): pass the SHA256SUMS make images writes", sumsFile, sysext.Etcdadm("VERSION").File)
	}
	return sysext.Image{}, fmt.Errorf("--sha256-file %s names etcdadm images of versions %s: pick the hosts' with --sysext-etcdadm-version", sumsFile, strings.Join(found, ", "))
}

func versionList(vs []etcdversion.Version) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = v.String()
	}
	return strings.Join(s, " ")
}

// storage adds the images, their activation links and the sysupdate
// transfers (for downloaded images: sysupdate keeps them current from
// the same URL).
func (s *sysextPlan) storage(st *storage) {
	if len(s.images) > 0 {
		st.Directories = append(st.Directories, directory{Path: sysext.StoreDir, Mode: 0o755})
	}
	for _, img := range s.images {
		st.Directories = append(st.Directories, directory{Path: path.Dir(img.Path()), Mode: 0o755})
		st.Files = append(st.Files, remoteFile(img.download, 0o644))
		for _, name := range img.TransferFiles() {
			st.Files = append(st.Files, inlineFile(img.TransferDir()+"/"+name, 0o644, img.Transfer(s.url)))
		}
		// Relative, like /opt/etcd/current, so it resolves under a root
		// prefix too; sysupdate's CurrentSymlink= moves it on an update.
		target := strings.Repeat("../", strings.Count(sysext.ActiveDir, "/")) + strings.TrimPrefix(img.Path(), "/")
		st.Links = append(st.Links, link{Path: img.Link(), Target: target, Hard: false, Overwrite: true})
	}
}

// sysextUnits are the units of a sysext host. The unit files are the
// etcdadm image's (/usr/lib/systemd/system), so the config writes none of
// them, only drop-ins. Enabling (a .wants link, Wants= or Upholds= on
// multi-user.target) would not start them: the boot's transaction is
// built before systemd-sysext merges the images, when the units do not
// exist, and systemd before 255 does not even reload after a merge.
// Instead sysextStarter, enabled and ordered after systemd-sysext.service,
// reloads the manager and starts sysextTarget, which wants every enabled
// unit hooked to a target; units hooked to another unit
// (etcd-wait-healthy.service to etcd.service) get a Wants= drop-in there,
// read when that unit starts. Upholds= on the
// units themselves would restart them after etcd-volume-renew fenced the
// host; the target's Wants= start each once, as enabling does.
func (p plan) sysextUnits(enabled []string) ([]unit, error) {
	dropins := map[string][]dropin{}
	for _, n := range units.Names() {
		if d := p.dropins(n); len(d) > 0 {
			dropins[n] = d
		}
	}
	var boot []string
	byUnit := map[string][]string{}
	for _, n := range enabled {
		wantedBy, err := units.WantedBy(n)
		if err != nil {
			return nil, fmt.Errorf("ignition: %w", err)
		}
		for _, t := range wantedBy {
			switch {
			case !strings.HasSuffix(t, ".target"):
				byUnit[t] = append(byUnit[t], n)
			case !slices.Contains(boot, n):
				boot = append(boot, n)
			}
		}
	}
	for t, ns := range byUnit {
		dropins[t] = append(dropins[t], dropin{Name: sysextDropin, Contents: "# etcdadm render --binaries sysext: these units of the etcdadm image are\n# enabled (WantedBy=" + t + ").\n[Unit]\n" + lines("Wants=", ns)})
	}
	yes := true
	out := []unit{{Name: sysextTarget, Contents: sysextTargetText(boot)}, {Name: sysextStarter, Enabled: &yes, Contents: sysextStarterText}}
	for _, n := range slices.Sorted(maps.Keys(dropins)) {
		out = append(out, unit{Name: n, Dropins: dropins[n]})
	}
	if enablesSysext(p.variant) {
		out = append(out, unit{Name: "systemd-sysext.service", Enabled: &yes})
	}
	return out, nil
}

func sysextTargetText(wants []string) string {
	return `[Unit]
Description=etcdadm's units from the etcdadm sysext image (etcdadm render --binaries sysext)
# Started by ` + sysextStarter + ` once systemd-sysext merged the images.
# Its Wants= start each enabled unit once, as enabling would; Upholds= on
# the units would restart them after a fence (etcd-volume-renew).
# systemctl restart ` + sysextTarget + ` starts them all again.
` + lines("Wants=", wants)
}

const sysextStarterText = `[Unit]
Description=Start etcdadm's units once systemd-sysext merged the images (etcdadm render --binaries sysext)
# The boot's transaction is built before the merge, when the images' units
# do not exist, so nothing read then can start them; and systemd before 255
# does not reload after a merge. So: after the merge, reload, then start.
After=systemd-sysext.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/systemctl daemon-reload
ExecStart=/usr/bin/systemctl start --no-block ` + sysextTarget + `

[Install]
WantedBy=multi-user.target
`

// lines is one "prefix value" line for each value.
func lines(prefix string, values []string) string {
	var b strings.Builder
	for _, v := range values {
		b.WriteString(prefix + v + "\n")
	}
	return b.String()
}
