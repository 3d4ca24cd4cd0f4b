package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runApp runs the command in process up to opening the store: the store
// directory does not exist, so every run that read --store stops there
// with an error naming it.
func runApp(t *testing.T, args ...string) error {
	t.Helper()
	app := newApp()
	app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
	app.ExitErrHandler = func(*cli.Context, error) {}
	host := []string{"--name", "etcd-a", "--ip", "10.0.0.1", "--etcd-user="}
	if len(args) > 0 && args[0] == "reconcile" {
		return app.Run(append(append([]string{"etcd-member-join", "reconcile"}, host...), args[1:]...))
	}
	return app.Run(append(append([]string{"etcd-member-join"}, host...), args...))
}

// setStoreEnv sets ETCDADM_STORE for the test, or unsets it: urfave/cli
// counts a variable set to "" as a flag given.
func setStoreEnv(t *testing.T, v string) {
	t.Setenv("ETCDADM_STORE", v)
	if v == "" {
		os.Unsetenv("ETCDADM_STORE")
	}
}

func TestStoreFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-store")
	url := "file://" + missing
	for _, tc := range []struct {
		name string
		env  string
		args []string
	}{
		{"reconcile --store", "", []string{"reconcile", "--store", url}},
		{"reconcile with ETCDADM_STORE", url, []string{"reconcile"}},
		{"boot run --store", "", []string{"--store", url}},
		{"boot run with ETCDADM_STORE", url, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setStoreEnv(t, tc.env)
			err := runApp(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), missing) {
				t.Errorf("got %v, want the store %s opened (and found missing)", err, missing)
			}
		})
	}
	for _, args := range [][]string{{"reconcile"}, nil} {
		setStoreEnv(t, "")
		if err := runApp(t, args...); err == nil || !strings.Contains(err.Error(), `"store" not set`) {
			t.Errorf("%q without a store: %v, want the missing --store named", args, err)
		}
	}
}

func TestEtcdUserUnknown(t *testing.T) {
	setStoreEnv(t, "file://"+t.TempDir())
	err := runApp(t, "--etcd-user", "no-such-user-here")
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != 2 || !strings.Contains(err.Error(), "no-such-user-here") {
		t.Errorf("unknown --etcd-user: %v, want exit 2 naming the user", err)
	}
}
