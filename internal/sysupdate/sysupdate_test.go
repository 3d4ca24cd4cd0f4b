package sysupdate

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store/filestore"
)

// fakeSystemd counts the merges asked for.
type fakeSystemd struct{ refreshes int }

func (f *fakeSystemd) Refresh(context.Context) error       { f.refreshes++; return nil }
func (f *fakeSystemd) StartSwitcher(context.Context) error { return nil }

// A run merges exactly when the links moved since the last merge: after
// an update, and after a run that stopped between an update and its merge,
// never when nothing changed.
func TestRunMergesWhatIsFetched(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc/sysupdate.etcd-3.6.d", "etc/extensions"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "etc/extensions/etcd-3.6.raw")
	point := func(v string) {
		os.Remove(link)
		if err := os.Symlink("/opt/extensions/etcd-3.6/etcd-v"+v+"-x86-64.raw", link); err != nil {
			t.Fatal(err)
		}
	}
	point("3.6.15")
	// systemd-sysupdate's part: move the link to the version in $NEXT.
	prog := filepath.Join(root, "sysupdate")
	script := "#!/bin/sh\n[ -z \"$NEXT\" ] || ln -sfn /opt/extensions/etcd-3.6/etcd-v$NEXT-x86-64.raw " + link + "\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sd := &fakeSystemd{}
	run := func(next string) Outcome {
		t.Helper()
		t.Setenv("NEXT", next)
		out, err := Run(context.Background(), Config{Root: root, Sysupdate: prog, Member: "etcd-a", StateDir: "var/lib/etcd-sysupdate"},
			Deps{Store: st, Systemd: sd, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	if out := run(""); out.Summary != "images current" || sd.refreshes != 0 {
		t.Fatalf("nothing newer: %q, %d merges; want images current, none", out.Summary, sd.refreshes)
	}
	if out := run("3.6.16"); !strings.HasPrefix(out.Summary, "updated etcd-3.6: etcd-v3.6.15-x86-64.raw → etcd-v3.6.16-x86-64.raw") || sd.refreshes != 1 {
		t.Fatalf("a newer patch: %q, %d merges; want it updated and merged once", out.Summary, sd.refreshes)
	}
	if run(""); sd.refreshes != 1 {
		t.Fatalf("nothing newer after the merge: %d merges, want still 1", sd.refreshes)
	}
	// A run fetched 3.6.17 and stopped before it merged.
	point("3.6.17")
	if out := run(""); out.Summary != "images current" || sd.refreshes != 2 {
		t.Fatalf("after a run stopped before its merge: %q, %d merges; want the fetched image merged (2)", out.Summary, sd.refreshes)
	}
}
