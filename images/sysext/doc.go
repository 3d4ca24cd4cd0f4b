// Package sysext builds (build.sh) and tests the systemd-sysext images for
// immutable hosts: etcd per version and etcdadm, with their sysupdate
// transfer files. Only its test has Go code.
package sysext
