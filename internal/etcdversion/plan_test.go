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
		refusal   []string // words the refusal must name
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
	} {
		t.Run(tc.from+"-"+tc.to, func(t *testing.T) {
			p, err := NewPlan(MustParse(tc.from), MustParse(tc.to), tc.available)
			if tc.path == "" {
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("want a refusal, got plan %s, err %v", p.Path(), err)
				}
				for _, w := range tc.refusal {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not name %q", err, w)
					}
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
	want37 := map[string]string{"ETCD_NAME": "etcd-a", "ETCD_SNAPSHOT_CATCHUP_ENTRIES": "5000", "ETCD_FEATURE_GATES": "InitialCorruptCheck=true"}
	if !equal(v37, want37) {
		t.Errorf("3.7: %v, want %v (notes %v)", v37, want37, notes)
	}
	if len(notes) != 4 {
		t.Errorf("3.7 notes: %q", notes)
	}
	v36, _ := Env(MustParse("3.6.16"), in)
	if _, ok := v36["ETCD_ENABLE_V2"]; ok || v36["ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES"] != "5000" {
		t.Errorf("3.6: %v", v36)
	}
	// Down again: 3.5 knows only the experimental names.
	v35, _ := Env(MustParse("3.5.35"), v37)
	want35 := map[string]string{"ETCD_NAME": "etcd-a", "ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES": "5000", "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK": "true"}
	if !equal(v35, want35) {
		t.Errorf("3.5: %v, want %v", v35, want35)
	}
	if in["ETCD_ENABLE_V2"] != "true" {
		t.Error("Env changed its input")
	}
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
