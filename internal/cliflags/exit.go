package cliflags

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"
)

// ExitUsage is every binary's code for a command line it cannot use: an
// unknown flag or command, a bad flag value, a required flag left out.
const ExitUsage = 2

// Run runs app with args and returns the process's exit code, for main to
// pass to os.Exit: 0 on success; the code of a cli.Exit error; else
// fallback(err), or 1 when fallback is nil. A failure is printed once to
// the app's ErrWriter as "<name>: <error>".
//
// urfave/cli would print a cli.Exit error and exit inside app.Run; Run
// takes that over so every command exits through this one path. A
// cli.Exit error keeps its code when wrapped too; an *exec.ExitError
// (which has an ExitCode method as well) does not: that code is a child's.
func Run(app *cli.App, args []string, fallback func(error) int) int {
	app.ExitErrHandler = func(*cli.Context, error) {}
	app.EnableBashCompletion = true
	if app.Version == "" {
		app.Version = Version() // --version on every binary
	}
	if app.Writer == nil {
		app.Writer = os.Stdout
	}
	var errW io.Writer = os.Stderr
	if app.ErrWriter != nil {
		errW = app.ErrWriter
	}
	if ok, code := generateDocs(app, args, errW); ok {
		return code
	}
	usage := func(c *cli.Context, err error, _ bool) error {
		return cli.Exit(fmt.Sprintf("%v (see '%s --help')", err, c.Command.HelpName), ExitUsage)
	}
	app.OnUsageError = usage
	app.Before = requireQuietly(app.Flags, app.Before)
	var walk func([]*cli.Command)
	walk = func(cs []*cli.Command) {
		for _, c := range cs {
			if c.OnUsageError == nil {
				c.OnUsageError = usage
			}
			c.Before = requireQuietly(c.Flags, c.Before)
			walk(c.Subcommands)
		}
	}
	walk(app.Commands)
	err := app.Run(args)
	// What urfave/cli reports without a hook: a required flag left out,
	// an unknown command (its help says "No help topic", exit 3).
	if msg := fmt.Sprint(err); err != nil && (strings.HasPrefix(msg, "Required flag") || strings.HasPrefix(msg, "No help topic for")) {
		msg = strings.Replace(msg, "No help topic for", "unknown command", 1)
		err = cli.Exit(fmt.Sprintf("%s (see '%s --help')", msg, commandPath(app, args)), ExitUsage)
	}
	if err == nil {
		return 0
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintf(errW, "%s: %s\n", app.Name, msg)
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if _, child := ec.(*exec.ExitError); !child {
			return ec.ExitCode()
		}
	}
	if fallback != nil {
		return fallback(err)
	}
	return 1
}

// requireQuietly takes the check of flags' required flags over from
// urfave/cli, which prints the whole help to the app's Writer (stdout:
// 'etcdadm render > x.ign' left the help in x.ign) before it fails. The
// flags stop being Required to urfave/cli; before (the command's own
// Before) runs once they are all set, and a missing one is the same
// error urfave/cli would give, which Run turns into a one-line hint.
func requireQuietly(flags []cli.Flag, before cli.BeforeFunc) cli.BeforeFunc {
	var required []string
	for _, f := range flags {
		rf, ok := f.(cli.RequiredFlag)
		if !ok || !rf.IsRequired() {
			continue
		}
		field := reflect.ValueOf(f)
		if field.Kind() != reflect.Pointer {
			continue
		}
		if r := field.Elem().FieldByName("Required"); r.IsValid() && r.CanSet() && r.Kind() == reflect.Bool {
			r.SetBool(false)
			required = append(required, f.Names()[0])
		}
	}
	if len(required) == 0 {
		return before
	}
	return func(c *cli.Context) error {
		var missing []string
		for _, name := range required {
			if !c.IsSet(name) {
				missing = append(missing, name)
			}
		}
		switch len(missing) {
		case 0:
		case 1:
			return fmt.Errorf("Required flag %q not set", missing[0])
		default:
			return fmt.Errorf("Required flags %q not set", strings.Join(missing, ", "))
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
}

// Always returns a fallback for Run that maps every other error to code:
// for commands whose own failures all carry a code, so what is left is a
// flag the command could not parse.
func Always(code int) func(error) int {
	return func(error) int { return code }
}

// commandPath is the command args name ("etcdadm pki issue-client"): the
// app's name and the command names that lead the arguments.
func commandPath(app *cli.App, args []string) string {
	path, cmds := []string{app.Name}, app.Commands
	for _, a := range args[min(1, len(args)):] {
		next := Lookup(cmds, a)
		if next == nil {
			break
		}
		path, cmds = append(path, next.Name), next.Subcommands
	}
	return strings.Join(path, " ")
}

// Lookup is the command of cmds named name (or aliased), or nil.
func Lookup(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
