package envfile

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"file:///var/lib/etcdadm/store":             "file:///var/lib/etcdadm/store",
		"10.0.0.1,2001:db8::1":                      "10.0.0.1,2001:db8::1",
		"s3://b/p?endpoint=https://h:9000&region=r": `"s3://b/p?endpoint=https://h:9000&region=r"`,
		`a "b" $c \d`:                               `"a \"b\" \$c \\d"`,
		"":                                          `""`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// What one writer writes, every reader reads back as it was.
func TestRoundTrip(t *testing.T) {
	want := map[string]string{
		"ETCDADM_STORE":     "s3://b/p?endpoint=https://h:9000&region=r",
		"ETCDADM_IPS":       "10.0.0.12,2001:db8::12",
		"ETCDADM_ODD":       `a "b" $c \d ` + "`x`",
		"ETCDADM_EMPTY":     "",
		"ETCD_INITIAL_URLS": "https://[2001:db8::12]:2380",
	}
	var b strings.Builder
	b.WriteString("# a comment\n\n")
	for k, v := range want {
		b.WriteString(Line(k, v))
	}
	path := filepath.Join(t.TempDir(), "x.env")
	os.WriteFile(path, []byte(b.String()), 0o644)
	got, err := Read(path)
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("read back %v, %v\nwant %v\nfile:\n%s", got, err, want, b.String())
	}
}

// Files written by hand or by older versions: quoting as systemd reads it.
func TestParse(t *testing.T) {
	got, err := Parse([]byte("; comment\n  ETCD_A = 1 \nETCD_B=\"x y\"\nETCD_C='$raw \\'\nETCD_D=a=b\nETCD_A=2\n"))
	want := map[string]string{"ETCD_A": "2", "ETCD_B": "x y", "ETCD_C": `$raw \`, "ETCD_D": "a=b"}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if _, err := Parse([]byte("ETCD_A=1\nnot an assignment\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("malformed line: %v, want an error naming line 2", err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none.env")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}
