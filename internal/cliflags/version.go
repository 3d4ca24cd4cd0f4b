package cliflags

import (
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// version is the release the build stamps in (images/sysext/build.sh:
// -ldflags "-X github.com/etcdadm/etcdadm-immutable/internal/cliflags.version=$ETCDADM_VERSION",
// from git describe), the same string the images carry in their names.
// Set by the linker only; never written at run time.
var version string

// Version is this build's version: the stamped one; else, for a plain go
// build in a git checkout, 0.0.0-git<commit>[-dirty] as the images name
// an untagged build; else 0.0.0-dev.
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "0.0.0-dev"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) >= 12 {
		return "0.0.0-git" + rev[:12] + dirty
	}
	return "0.0.0-dev"
}

// VersionCommand is 'NAME version': the version on stdout, alone on its
// line, for scripts ('--version' says "NAME version V").
func VersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print this binary's version (the release the images carry)",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("version takes no arguments", ExitUsage)
			}
			fmt.Fprintln(c.App.Writer, Version())
			return nil
		},
	}
}
