// Command etcdadm is the operator CLI: backups, restores, and (as the
// project grows) specs, PKI, members and versions.
package main

import (
	"os"

	"github.com/etcdadm/etcdadm-immutable/internal/adm"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
)

func main() {
	cliflags.LoadHostEnv("/etc/etcdadm/etcdadm.env")
	app := adm.App(os.Stdout)
	os.Exit(cliflags.Run(app, adm.Interspersed(app, os.Args), nil))
}
