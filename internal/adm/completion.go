package adm

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
)

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for etcdadm (bash, zsh or fish)",
		ArgsUsage: strings.Join(cliflags.Shells(), "|"),
		Description: `Prints a completion script on standard output. Install it where your shell
looks, or source it:

  etcdadm completion bash >/etc/bash_completion.d/etcdadm     # or: source <(etcdadm completion bash)
  etcdadm completion zsh  >/usr/local/share/zsh/site-functions/_etcdadm
  etcdadm completion fish >~/.config/fish/completions/etcdadm.fish

The etcdadm sysext image installs all three, for every binary it ships.`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit(fmt.Sprintf("name one shell: %s (see 'etcdadm completion --help')", strings.Join(cliflags.Shells(), ", ")), cliflags.ExitUsage)
			}
			out, err := cliflags.Completion(c.App, c.Args().First())
			if err != nil {
				return cli.Exit(err.Error()+" (see 'etcdadm completion --help')", cliflags.ExitUsage)
			}
			_, err = fmt.Fprint(c.App.Writer, out)
			return err
		},
	}
}
