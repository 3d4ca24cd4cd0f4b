package etcdversion

import (
	"errors"
	"strings"
	"testing"
)

func vs(ss ...string) []Version {
	var out []Version
	for _, s := range ss {
		out = append(out, MustParse(s))
	}
	return out
}

func TestPlan(t *testing.T) {
	all := vs("3.5.20", "3.5.35", "3.6.5", "3.6.16", "3.7.3")
	for _, tc := range []struct {
		from, to  string
		available []Version
		path      string   // "" when refused
		kinds     []Kind   // of each step
		refusal   []string // words the refusal must name, in this order
	}{
		{from: "3.5.35", to: "3.5.35", available: all, path: "3.5.35"},
		{from: "3.5.20", to: "3.5.35", available: all, path: "3.5.20 → 3.5.35", kinds: []Kind{Patch}},
		{from: "3.6.16", to: "3.6.5", available: all, path: "3.6.16 → 3.6.5", kinds: []Kind{Patch}},
		{from: "3.5.35", to: "3.6.16", available: all, path: "3.5.35 → 3.6.16", kinds: []Kind{MinorUp}},
		// Below the minimum patch: the newest 3.5 first (the example).
		{from: "3.5.20", to: "3.7.3", available: all, path: "3.5.20 → 3.5.35 → 3.6.16 → 3.7.3", kinds: []Kind{Patch, MinorUp, MinorUp}},
		// 3.6.5 is below 3.6.11: go to the newest 3.6 before 3.7.
		{from: "3.6.5", to: "3.7.3", available: all, path: "3.6.5 → 3.6.16 → 3.7.3", kinds: []Kind{Patch, MinorUp}},
		{from: "3.7.3", to: "3.6.16", available: all, path: "3.7.3 → 3.6.16", kinds: []Kind{MinorDown}},
		{from: "3.6.16", to: "3.5.35", available: all, path: "3.6.16 → 3.5.35", kinds: []Kind{MinorDown}},
		// Refusals name the path and the fix.
		{from: "3.7.3", to: "3.5.35", available: all, refusal: []string{"3.7.3 → 3.5.35", "one minor at a time", "upgrade --to 3.6.x"}},
		{from: "3.5.35", to: "3.7.3", available: vs("3.5.35", "3.7.3"), refusal: []string{"skips minor 3.6", "release push"}},
		{from: "3.5.20", to: "3.6.16", available: vs("3.5.20", "3.6.16"), refusal: []string{"3.5.26 or later", "3.5 release ≥ 3.5.26"}},
		{from: "3.5.35", to: "3.6.17", available: all, refusal: []string{"3.6.17 is not available", "release push 3.6.17"}},
		{from: "3.5.35", to: "3.8.0", available: append(all, MustParse("3.8.0")), refusal: []string{"unsupported etcd version 3.8.0"}},
		{from: "3.4.26", to: "3.5.35", available: all, refusal: []string{"3.4.26"}},
		// Every reason at once, the most fundamental first: the path, the
		// gates, then the releases (issue 23: the missing 3.7.3 came first,
		// and after pushing it the skipped 3.6).
		{from: "3.5.35", to: "3.7.3", available: vs("3.5.35"), refusal: []string{"for 2 reasons, to fix in this order",
			"(1) 3.5.35 → 3.7.3 skips minor 3.6", "3.6 release ≥ 3.6.11", "release push 3.6.N",
			"(2) etcd 3.7.3 is not available", "release push 3.7.3"}},
		{from: "3.5.20", to: "3.7.3", available: vs("3.5.20", "3.6.5"), refusal: []string{"for 3 reasons",
			"(1) 3.5.20 → 3.7.3 skips minor 3.6", "3.6 release ≥ 3.6.11",
			"(2) 3.5.20 → 3.6 needs every member at 3.5.26 or later", "release push 3.5.N",
			"(3) etcd 3.7.3 is not available", "release push 3.7.3"}},
		{from: "3.5.20", to: "3.6.16", available: vs("3.5.20"), refusal: []string{"(1) 3.5.20 → 3.6 needs every member at 3.5.26", "(2) etcd 3.6.16 is not available"}},
		{from: "3.7.3", to: "3.5.99", available: all, refusal: []string{"(1) 3.7.3 → 3.5.99 goes down 2 minors", "upgrade --to 3.6.x", "(2) etcd 3.5.99 is not available"}},
	} {
		t.Run(tc.from+"-"+tc.to, func(t *testing.T) {
			p, err := NewPlan(MustParse(tc.from), MustParse(tc.to), tc.available)
			if tc.path == "" {
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("want a refusal, got plan %s, err %v", p.Path(), err)
				}
				rest := err.Error()
				for _, w := range tc.refusal {
					i := strings.Index(rest, w)
					if i < 0 {
						t.Errorf("refusal %q does not name %q (after the words before it)", err, w)
						break
					}
					rest = rest[i+len(w):]
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Path() != tc.path {
				t.Fatalf("path %s, want %s", p.Path(), tc.path)
			}
			for i, s := range p.Steps {
				if s.Kind != tc.kinds[i] {
					t.Errorf("step %d %s: kind %s, want %s", i, s, s.Kind, tc.kinds[i])
				}
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"", "3.6", "3.6.16.1", "3.6.x", " 3.6.16"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if v, err := Parse("v3.6.16"); err != nil || v != (Version{3, 6, 16}) || v.MinorString() != "3.6" {
		t.Errorf("Parse(v3.6.16) = %v, %v", v, err)
	}
}

func TestEnv(t *testing.T) {
	in := map[string]string{
		"ETCD_NAME":      "etcd-a",
		"ETCD_ENABLE_V2": "true",
		"ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES": "5000",
		"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK":    "true",
		"ETCD_EXPERIMENTAL_NO_SUCH_THING":            "1",
	}
	v37, notes := Env(MustParse("3.7.3"), in)
	want37 := map[string]string{"ETCD_NAME": "etcd-a", "ETCD_SNAPSHOT_CATCHUP_ENTRIES": "5000", "ETCD_FEATURE_GATES": "CompactHashCheck=true,InitialCorruptCheck=true"}
	if !equal(v37, want37) {
		t.Errorf("3.7: %v, want %v (notes %v)", v37, want37, notes)
	}
	if len(notes) != 4 {
		t.Errorf("3.7 notes: %q", notes)
	}
	v36, _ := Env(MustParse("3.6.16"), in)
	// 3.6 refuses an experimental flag next to its feature gate: the gate only.
	if _, ok := v36["ETCD_ENABLE_V2"]; ok || v36["ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES"] != "5000" ||
		v36["ETCD_FEATURE_GATES"] != "CompactHashCheck=true,InitialCorruptCheck=true" || v36["ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK"] != "" {
		t.Errorf("3.6: %v", v36)
	}
	// Down again: 3.5 knows only the experimental names.
	v35, _ := Env(MustParse("3.5.35"), v37)
	want35 := map[string]string{"ETCD_NAME": "etcd-a", "ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES": "5000",
		"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK": "true", "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED": "true"}
	if !equal(v35, want35) {
		t.Errorf("3.5: %v, want %v", v35, want35)
	}
	if in["ETCD_ENABLE_V2"] != "true" {
		t.Error("Env changed its input")
	}
}

// TestEnvCorruptionChecks: etcd's corruption checks are on in each
// version's spelling; the operator's own value, in any spelling, stands;
// other feature gates are kept; and a file written for one version and
// rewritten for another (the switcher) equals the one member join writes
// for that version (else its next run would restart etcd).
func TestEnvCorruptionChecks(t *testing.T) {
	base := map[string]string{"ETCD_NAME": "etcd-a"}
	want := map[string]map[string]string{
		"3.5.35": {"ETCD_NAME": "etcd-a", "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK": "true", "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED": "true"},
		"3.6.16": {"ETCD_NAME": "etcd-a", "ETCD_FEATURE_GATES": "CompactHashCheck=true,InitialCorruptCheck=true"},
		"3.7.3":  {"ETCD_NAME": "etcd-a", "ETCD_FEATURE_GATES": "CompactHashCheck=true,InitialCorruptCheck=true"},
	}
	for v, w := range want {
		got, notes := Env(MustParse(v), base)
		if !equal(got, w) || len(notes) != 0 {
			t.Errorf("%s: %v (notes %q), want %v", v, got, notes, w)
		}
		for u := range want {
			if again, _ := Env(MustParse(v), envOnly(MustParse(u), base)); !equal(again, w) {
				t.Errorf("written for %s, rewritten for %s: %v, want %v", u, v, again, w)
			}
		}
	}
	for _, tc := range []struct {
		v    string
		in   map[string]string
		want map[string]string
	}{
		{"3.5.35", map[string]string{"ETCD_FEATURE_GATES": "InitialCorruptCheck=false"},
			map[string]string{"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK": "false", "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED": "true"}},
		{"3.6.16", map[string]string{"ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED": "false", "ETCD_FEATURE_GATES": "StopGRPCServiceOnDefrag=true"},
			map[string]string{"ETCD_FEATURE_GATES": "CompactHashCheck=false,InitialCorruptCheck=true,StopGRPCServiceOnDefrag=true"}},
		{"3.7.3", map[string]string{"ETCD_FEATURE_GATES": "InitialCorruptCheck=false, StopGRPCServiceOnDefrag=true"},
			map[string]string{"ETCD_FEATURE_GATES": "CompactHashCheck=true,InitialCorruptCheck=false,StopGRPCServiceOnDefrag=true"}},
	} {
		if got, _ := Env(MustParse(tc.v), tc.in); !equal(got, tc.want) {
			t.Errorf("%s, %v: %v, want %v", tc.v, tc.in, got, tc.want)
		}
	}
}

// envOnly is Env without its notes.
func envOnly(v Version, in map[string]string) map[string]string {
	out, _ := Env(v, in)
	return out
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Issue 26 finding 3: a version above the newest patch this build knows
// is not a release (3.6.999 is a typo until it is pushed into the store).
func TestReleased(t *testing.T) {
	for v, want := range map[string]string{"3.5.0": "", "3.5.35": "", "3.6.16": "", "3.7.3": "", "3.6.999": "newest 3.6 is 3.6.16", "3.7.4": "newest 3.7 is 3.7.3", "3.9.1": "unsupported"} {
		err := Released(MustParse(v))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", v, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", v, err, want)
		}
	}
}
