// Package settings knows every ETCDADM_* variable a binary reads: it walks
// the flag definitions of the binaries (each binary's flags package) and
// checks a KEY=VALUE the way the binaries would parse it, so 'etcdadm
// render --env' refuses a misspelt key or a bad value before it reaches
// every master. Imported by internal/adm only: it links every binary's
// flags.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/dnsflags"
	"github.com/etcdadm/etcdadm-immutable/internal/memberflags"
	"github.com/etcdadm/etcdadm-immutable/internal/uploaderflags"
	"github.com/etcdadm/etcdadm-immutable/internal/volumeflags"
)

// Binary is one program and the flags of one of its commands.
type Binary struct {
	Name  string // "etcd-member-join", "etcdadm pki renew"
	Flags func() []cli.Flag
}

// Daemons are the binaries the units run, with their flags.
func Daemons() []Binary {
	return []Binary{
		{"etcd-volume-attach", volumeflags.Flags},
		{"etcd-member-join", func() []cli.Flag { return memberflags.Join(nil) }},
		{"etcd-version-switcher", memberflags.Switcher},
		{"etcd-snapshot-uploader", uploaderflags.Flags},
		{"etcd-dns-registrar", dnsflags.Flags},
	}
}

// Commands are the commands of app (and their subcommands), each with its
// own flags and the app's.
func Commands(app *cli.App) []Binary {
	var out []Binary
	var walk func(path string, inherited []cli.Flag, cs []*cli.Command)
	walk = func(path string, inherited []cli.Flag, cs []*cli.Command) {
		for _, c := range cs {
			fs := append(slices.Clone(inherited), c.Flags...)
			p := path + " " + c.Name
			out = append(out, Binary{p, func() []cli.Flag { return fs }})
			walk(p, inherited, c.Subcommands)
		}
	}
	out = append(out, Binary{app.Name, func() []cli.Flag { return app.Flags }})
	walk(app.Name, app.Flags, app.Commands)
	return out
}

// use is one flag that reads a variable.
type use struct {
	binary string
	flag   cli.Flag
}

// Catalogue is every variable the binaries read.
type Catalogue struct {
	vars map[string][]use
}

// New builds the catalogue of bins.
func New(bins ...Binary) *Catalogue {
	c := &Catalogue{vars: map[string][]use{}}
	for _, b := range bins {
		for _, f := range b.Flags() {
			if f == nil {
				continue
			}
			ev, ok := f.(interface{ GetEnvVars() []string })
			if !ok {
				continue
			}
			for _, k := range ev.GetEnvVars() {
				c.vars[k] = append(c.vars[k], use{b.Name, f})
			}
		}
	}
	return c
}

// Keys are the variables, sorted.
func (c *Catalogue) Keys() []string {
	keys := make([]string, 0, len(c.vars))
	for k := range c.vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ErrUnknown: no binary reads the variable.
var ErrUnknown = errors.New("no binary reads it")

// Check refuses a key no binary reads (naming the closest one that is
// read) and a value one of the flags that read key would refuse: of the
// wrong type, or outside the flag's rule.
func (c *Catalogue) Check(key, value string) error {
	uses, ok := c.vars[key]
	if !ok {
		if near := c.closest(key); near != "" {
			return fmt.Errorf("%s: %w; did you mean %s?", key, ErrUnknown, near)
		}
		return fmt.Errorf("%s: %w (see 'etcdadm render --help' for where the settings are listed)", key, ErrUnknown)
	}
	for _, u := range uses {
		if err := checkValue(u.flag, value); err != nil {
			return fmt.Errorf("%s=%s (%s --%s): %w", key, value, u.binary, u.flag.Names()[0], err)
		}
	}
	return nil
}

// checkValue parses value as f would from its variable and runs f's
// action (its range rule), in a flag set of its own.
func checkValue(f cli.Flag, value string) error {
	set := flag.NewFlagSet("check", flag.ContinueOnError)
	set.SetOutput(io.Discard)
	f = withoutEnv(f)
	if err := f.Apply(set); err != nil {
		return err
	}
	name := f.Names()[0]
	if err := set.Set(name, value); err != nil {
		return fmt.Errorf("want %s", kind(f))
	}
	af, ok := f.(cli.ActionableFlag)
	if !ok {
		return nil
	}
	err := af.RunAction(cli.NewContext(&cli.App{}, set, nil))
	var ec cli.ExitCoder
	if errors.As(err, &ec) && ec.Error() != "" {
		return errors.New(ec.Error())
	}
	return err
}

// withoutEnv is a copy of f that reads no variable: what the process's
// own environment holds is not what is being checked.
func withoutEnv(f cli.Flag) cli.Flag {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return f
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	if e := cp.Elem().FieldByName("EnvVars"); e.IsValid() && e.CanSet() {
		e.Set(reflect.Zero(e.Type()))
	}
	return cp.Interface().(cli.Flag)
}

// kind says what values a flag takes.
func kind(f cli.Flag) string {
	switch f.(type) {
	case *cli.DurationFlag:
		return "a duration such as 90s, 2m or 1h30m"
	case *cli.IntFlag, *cli.Int64Flag:
		return "a whole number"
	case *cli.UintFlag, *cli.Uint64Flag:
		return "a whole number, 0 or more"
	case *cli.BoolFlag:
		return "true or false"
	case *cli.Float64Flag:
		return "a number"
	}
	return "a value " + f.Names()[0] + " accepts"
}

// closest is the known key nearest to key, if it is near enough to be a
// typo: at most a third of its letters differ.
func (c *Catalogue) closest(key string) string {
	best, bestD := "", len(key)/3+1
	for _, k := range c.Keys() {
		if d := distance(strings.ToUpper(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
