// Package etcdversion holds the rules of moving etcd between versions: which
// versions we run, which paths between them etcd supports in place (a patch
// or one minor up, one minor down through the downgrade API), the minimum
// patch before a minor step, and how etcd's settings change from one
// version to the next. Pure functions, no I/O: the planner (etcdadm
// upgrade), the switcher (internal/rollout) and member join all use these.
package etcdversion

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// Version is an etcd release, major.minor.patch.
type Version struct{ Major, Minor, Patch int }

var versionRE = regexp.MustCompile(`^v?([0-9]+)\.([0-9]+)\.([0-9]+)$`)

// ErrUnsupported: a version we do not run.
var ErrUnsupported = errors.New("unsupported etcd version")

// Parse reads "3.6.16" (a leading v, as in etcd's release tags, is accepted).
func Parse(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("etcd version %q: not a version like 3.6.16", s)
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	return v, nil
}

// MustParse is Parse for constants.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MinorString is "3.6": what etcd calls the cluster and storage version.
func (v Version) MinorString() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Compare orders versions.
func Compare(a, b Version) int {
	if c := cmp.Compare(a.Major, b.Major); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Minor, b.Minor); c != 0 {
		return c
	}
	return cmp.Compare(a.Patch, b.Patch)
}

// SameMinor reports whether a and b share major and minor.
func SameMinor(a, b Version) bool { return a.Major == b.Major && a.Minor == b.Minor }

// supported are the minors we run in place; the value is the minimum patch
// every member must run before the cluster moves up to the NEXT minor (etcd
// issues #19557, #20793, #20967: older patches can resurrect removed members
// or demote promoted voters across the step). The newest minor has none.
// newest is the newest patch of the minor this build knows as released
// (the builds the project pins: images/sysext/build.sh, test/testenv).
type minorRule struct{ minor, minBeforeNext, newest int }

func supported() []minorRule {
	return []minorRule{
		{5, 26, 35},
		{6, 11, 16},
		{7, -1, 3},
	}
}

// ErrUnreleased: a version newer than any release of its minor this build
// knows.
var ErrUnreleased = errors.New("not a release this etcdadm knows")

// Released reports nil for a supported version no newer than the newest
// patch of its minor this build knows (an etcd release made after it is
// declared by pushing it into the store first: etcdbin.Releases.Known).
func Released(v Version) error {
	if err := Supported(v); err != nil {
		return err
	}
	for _, s := range supported() {
		if s.minor == v.Minor && v.Patch > s.newest {
			return fmt.Errorf("etcd %s: %w (the newest %s is %d.%d.%d)", v, ErrUnreleased, v.MinorString(), v.Major, v.Minor, s.newest)
		}
	}
	return nil
}

// Supported reports nil for a version we run (3.5.x, 3.6.x, 3.7.x).
func Supported(v Version) error {
	if v.Major == 3 {
		for _, s := range supported() {
			if s.minor == v.Minor {
				return nil
			}
		}
	}
	return fmt.Errorf("%w %s: use 3.5.x, 3.6.x or 3.7.x", ErrUnsupported, v)
}

// MinimumBeforeNext is the lowest patch of v's minor from which the next
// minor may be reached in place; ok is false when there is no next minor.
func MinimumBeforeNext(v Version) (Version, bool) {
	for _, s := range supported() {
		if v.Major == 3 && s.minor == v.Minor && s.minBeforeNext >= 0 {
			return Version{3, v.Minor, s.minBeforeNext}, true
		}
	}
	return Version{}, false
}
