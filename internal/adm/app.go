// Package adm is the etcdadm operator CLI: its commands, their flags and
// their output. cmd/etcdadm only runs it.
package adm

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
)

// App is the etcdadm command tree, writing to out.
func App(out io.Writer) *cli.App {
	return &cli.App{
		Name:  "etcdadm",
		Usage: "operate etcd for Kubernetes control planes on immutable hosts",
		Description: `etcdadm works on a cluster through its shared store (file:///path or
s3://bucket/prefix): backups there use etcd-manager's layout, so backups and
clusters move between etcd-manager and etcdadm.

On a host, the units do the work (systemctl status etcd etcd-snapshot-uploader.timer);
etcdadm is what you run to look and to act by hand.`,
		Writer:          out,
		Flags:           []cli.Flag{cliflags.LogLevel()},
		Commands:        []*cli.Command{seedCommand(), specCommand(), statusCommand(), memberCommand(), pkiCommand(), backupCommand(), restoreLocalCommand(), waitHealthyCommand(), renderCommand(), upgradeCommand(), releaseCommand(), restoreCommand(), sysupdateCommand(), teardownCommand(), recoverCommand(), adoptCommand(), pauseCommand(), resumeCommand(), initCommand(), joinCommand(), resetCommand(), completionCommand(), cliflags.VersionCommand()},
		HideHelpCommand: true,
	}
}

func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table or json",
		Action: func(_ *cli.Context, v string) error {
			if v != "table" && v != "json" {
				return cli.Exit(fmt.Sprintf("--output %q: want table or json", v), cliflags.ExitUsage)
			}
			return nil
		}}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func humanBytes(n int64) string {
	if n < 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func humanAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
