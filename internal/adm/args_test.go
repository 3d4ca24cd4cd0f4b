package adm

import (
	"io"
	"reflect"
	"testing"
)

func TestInterspersed(t *testing.T) {
	app := App(io.Discard)
	for _, tc := range []struct{ in, want []string }{
		{
			[]string{"etcdadm", "backup", "verify", "latest", "--restore-test", "--store", "file:///s"},
			[]string{"etcdadm", "backup", "verify", "--restore-test", "--store", "file:///s", "--", "latest"},
		},
		{
			[]string{"etcdadm", "backup", "list", "--store=file:///s"},
			[]string{"etcdadm", "backup", "list", "--store=file:///s"},
		},
		{
			[]string{"etcdadm", "--log-level", "debug", "restore-local", "x", "--name", "a"},
			[]string{"etcdadm", "--log-level", "debug", "restore-local", "--name", "a", "--", "x"},
		},
		{
			// A value flag last without its value: left to the parser's
			// "flag needs an argument" (this panicked).
			[]string{"etcdadm", "pause", "--store", "file:///s", "--reason"},
			[]string{"etcdadm", "pause", "--store", "file:///s", "--reason"},
		},
	} {
		if got := Interspersed(app, tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Interspersed(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
