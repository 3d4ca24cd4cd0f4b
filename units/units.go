// Package units holds the systemd units every host runs, embedded so that
// etcdadm render emits them from this one source. Units are static: per
// host values live in environment files (/etc/etcdadm/etcdadm.env,
// /etc/etcdadm/host.env, /run/etcdadm/identity.env, /etc/etcd/etcd.env).
package units

import (
	"embed"
	"io/fs"
	"sort"
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
		"etcd-wait-healthy.service",
	}
}
