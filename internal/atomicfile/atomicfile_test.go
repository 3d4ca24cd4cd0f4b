package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600, -1, -1); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Errorf("after Write: %q mode %v, want \"new\" 0600", b, fi.Mode().Perm())
	}
	// A directory that does not exist: an error naming the path, nothing left.
	err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600, -1, -1)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write into a missing directory: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*"+TempMark+"*")); len(m) != 0 {
		t.Errorf("temp files left: %v", m)
	}
}
