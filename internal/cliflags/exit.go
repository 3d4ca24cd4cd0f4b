package cliflags

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/urfave/cli/v2"
)

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
	err := app.Run(args)
	if err == nil {
		return 0
	}
	var w io.Writer = os.Stderr
	if app.ErrWriter != nil {
		w = app.ErrWriter
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintf(w, "%s: %s\n", app.Name, msg)
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

// Always returns a fallback for Run that maps every other error to code:
// for commands whose own failures all carry a code, so what is left is a
// flag the command could not parse.
func Always(code int) func(error) int {
	return func(error) int { return code }
}
