// Package sysext builds (build.sh) and tests the systemd-sysext images for
// immutable hosts: etcd per version and etcdadm, with their sysupdate
// transfer files. Go code: its test, and sysupdate/ (build.sh writes the
// transfer files with it, from internal/sysext).
package sysext
