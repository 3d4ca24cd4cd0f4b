// Package units holds the systemd units every host runs, embedded so that
// etcdadm render emits them from this one source. Units are static: per
// host values live in environment files (/etc/etcdadm/etcdadm.env,
// /etc/etcdadm/host.env, /run/etcdadm/identity.env, /etc/etcd/etcd.env).
package units

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

//go:embed *.service *.timer
var files embed.FS

// Names lists the embedded units, sorted.
func Names() []string {
	des, _ := fs.ReadDir(files, ".")
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

// Read returns one unit's text.
func Read(name string) ([]byte, error) { return files.ReadFile(name) }

// WantedBy lists the units the [Install] section of unit name hooks it to
// (WantedBy=): what enabling it means.
func WantedBy(name string) ([]string, error) {
	b, err := Read(name)
	if err != nil {
		return nil, fmt.Errorf("units: %w", err)
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("units: %s: %w", name, err)
	}
	var out []string
	for _, o := range opts {
		if o.Section == "Install" && o.Name == "WantedBy" {
			out = append(out, strings.Fields(o.Value)...)
		}
	}
	return out, nil
}

// ManualEnabled are the units a master built by hand enables (etcdadm
// render --manual): member join at boot, to start the member on its own
// data after 'etcdadm init' or 'join', and certificate renewal.
func ManualEnabled() []string {
	return []string{"etcd-member-join.service", "etcd-pki-renew.timer"}
}

// Enabled are the units a host enables; etcd.service is started by
// etcd-member-join, not enabled on its own.
func Enabled() []string {
	return []string{
		"etcd-volume-attach.service",
		"etcd-volume-renew.timer",
		"etcd-member-join.service",
		"etcd-member-join.timer",
		"etcd-reconcile.timer",
		"etcd-snapshot-uploader.timer",
		"etcd-pki-renew.timer",
		"etcd-version-switcher.timer",
		"etcd-wait-healthy.service",
	}
}

// BinDir is where our programs live on a host.
const BinDir = "/opt/etcdadm/bin"

// Programs are our programs the units run (every ExecStart= under
// BinDir), sorted: what a host must be given, baked or downloaded.
func Programs() []string {
	var out []string
	for _, n := range Names() {
		b, _ := Read(n)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			cmd, ok := strings.CutPrefix(sc.Text(), "ExecStart=")
			exe, _, _ := strings.Cut(cmd, " ")
			if ok && path.Dir(exe) == BinDir && !slices.Contains(out, path.Base(exe)) {
				out = append(out, path.Base(exe))
			}
		}
	}
	sort.Strings(out)
	return out
}

// StoreCredential is the line by which a unit says it opens the store: it
// loads the S3 credentials (a comment-only file for a file:// store).
const StoreCredential = "LoadCredential=aws:"

// ReadsStore reports whether unit name opens the store (it loads
// StoreCredential): etcdadm render gives exactly these units write access
// to a file:// store's directory.
func ReadsStore(name string) bool {
	b, err := Read(name)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), StoreCredential) {
			return true
		}
	}
	return false
}

// Interval is how often timer runs its service once it has run
// (OnUnitInactiveSec=, OnUnitActiveSec=, or OnCalendar=*:0/N): what a message or a document
// may promise about "the timer acts within ...".
func Interval(timer string) (time.Duration, error) {
	b, err := files.ReadFile(timer)
	if err != nil {
		return 0, fmt.Errorf("units: %w", err)
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("units: %s: %w", timer, err)
	}
	for _, o := range opts {
		if o.Section == "Timer" && (o.Name == "OnUnitInactiveSec" || o.Name == "OnUnitActiveSec") && o.Value != "" {
			d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(o.Value, "min", "m"), " ", ""))
			if err != nil {
				return 0, fmt.Errorf("units: %s: %s=%s: %w", timer, o.Name, o.Value, err)
			}
			return d, nil
		}
		// Every N minutes of the hour: *:0/N.
		if o.Section == "Timer" && o.Name == "OnCalendar" {
			if rest, ok := strings.CutPrefix(o.Value, "*:0/"); ok {
				if n, err := strconv.Atoi(rest); err == nil && n > 0 {
					return time.Duration(n) * time.Minute, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("units: %s repeats on no interval (OnUnitInactiveSec=, or OnCalendar=*:0/N)", timer)
}
