package rollout

import (
	"strings"
	"testing"
)

func TestGate(t *testing.T) {
	m := func(name string, healthy, learner bool) MemberState {
		return MemberState{Name: name, Healthy: healthy, Learner: learner}
	}
	for _, tc := range []struct {
		name    string
		members []MemberState
		want    string // "" = may restart
	}{
		{"all healthy", []MemberState{m("a", true, false), m("b", true, false), m("c", true, false)}, ""},
		{"one down", []MemberState{m("a", true, false), m("b", false, false), m("c", true, false)}, "b is not healthy"},
		{"learner", []MemberState{m("a", true, false), m("b", true, false), m("d", true, true)}, "d is a learner"},
		{"two members", []MemberState{m("a", true, false), m("b", true, false)}, "fewer than a quorum"},
		{"single member", []MemberState{m("a", true, false)}, ""},
	} {
		got := gate(ClusterState{Members: tc.members}, "a")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: gate says %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestMinorOf(t *testing.T) {
	for in, want := range map[string]string{"3.6.0": "3.6", "3.5": "3.5", "3.7.3": "3.7"} {
		if got := minorOf(in); got != want {
			t.Errorf("minorOf(%q) = %q, want %q", in, got, want)
		}
	}
}
