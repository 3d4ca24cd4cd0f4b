// Command etcdadm is the operator CLI: backups, restores, and (as the
// project grows) specs, PKI, members and versions.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/adm"
	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
)

func main() {
	cliflags.LoadHostEnv("/etc/etcdadm/etcdadm.env")
	app := adm.App(os.Stdout)
	if err := app.Run(adm.Interspersed(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "etcdadm:", err)
		if ec, ok := err.(cli.ExitCoder); ok {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}
