package adm

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/cliflags"
)

// Interspersed moves flags that follow positional arguments in front of
// them, so "etcdadm backup verify latest --store URL" works: urfave/cli v2
// stops parsing flags at the first positional argument.
func Interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 || strings.HasPrefix(args[1], "--generate-") {
		return args // cliflags.Run's requests for a man page or completion
	}
	cmds, flags := app.Commands, app.Flags
	i := 1
	for ; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if takesValue(flags, a) && !strings.Contains(a, "=") {
				i++
			}
			continue
		}
		next := cliflags.Lookup(cmds, a)
		if next == nil {
			break
		}
		cmds, flags = next.Subcommands, next.Flags
	}
	i = min(i, len(args)) // a value flag last, its value missing: the parser says so
	var flagArgs, pos []string
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			pos = append(pos, args[j+1:]...)
			j = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			flagArgs = append(flagArgs, a)
			if takesValue(flags, a) && !strings.Contains(a, "=") && j+1 < len(args) {
				flagArgs = append(flagArgs, args[j+1])
				j++
			}
		default:
			pos = append(pos, a)
		}
	}
	out := append(append([]string{}, args[:i]...), flagArgs...)
	if len(pos) > 0 {
		out = append(append(out, "--"), pos...)
	}
	return out
}

func takesValue(flags []cli.Flag, arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
