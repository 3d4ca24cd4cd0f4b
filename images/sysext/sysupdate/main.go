// Command sysupdate writes the systemd-sysupdate transfer files of the
// sysext images for build.sh, from internal/sysext (the text etcdadm
// render --binaries sysext puts on the hosts):
//
//	go run ./images/sysext/sysupdate URL DIR ETCD_VERSION...
//
// DIR gets NAME.transfer and NAME.conf for each etcd minor and for
// etcdadm. Build tooling only: not shipped in any image.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdversion"
	"github.com/etcdadm/etcdadm-immutable/internal/sysext"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sysupdate:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: sysupdate URL DIR ETCD_VERSION...")
	}
	url, dir := args[0], args[1]
	// The transfer names no version: any etcdadm image stands for all.
	images := []sysext.Image{sysext.Etcdadm("")}
	for _, s := range args[2:] {
		v, err := etcdversion.Parse(s)
		if err != nil {
			return err
		}
		images = append(images, sysext.Etcd(v))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, img := range images {
		for _, name := range img.TransferFiles() {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(img.Transfer(url)), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
