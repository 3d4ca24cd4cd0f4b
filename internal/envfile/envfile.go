// Package envfile reads and writes the KEY=VALUE environment files the
// units load with EnvironmentFile= (etcdadm.env, host.env, identity.env,
// etcd.env, etcd-settings.env), the way systemd reads them for the files
// we and operators write: blank lines and # comments skipped, a value in
// double quotes unquoted (with \ escapes), in single quotes taken as it
// is. Standard library only: every binary may import it.
package envfile

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Read reads the file at path. A missing file is an error wrapping
// fs.ErrNotExist; a line without '=' is an error naming the line.
func Read(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	vars, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	return vars, nil
}

// Parse reads environment file content; a later assignment wins.
func Parse(b []byte) (map[string]string, error) {
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("line %d: malformed %q: want KEY=VALUE", n, line)
		}
		vars[k] = unquote(strings.TrimSpace(v))
	}
	return vars, sc.Err()
}

func unquote(v string) string {
	if len(v) < 2 || v[0] != v[len(v)-1] {
		return v
	}
	switch v[0] {
	case '\'':
		return v[1 : len(v)-1]
	case '"':
		var b strings.Builder
		in := v[1 : len(v)-1]
		for i := 0; i < len(in); i++ {
			if in[i] == '\\' && i+1 < len(in) {
				i++
			}
			b.WriteByte(in[i])
		}
		return b.String()
	}
	return v
}

// Line is one KEY=VALUE line, the value double-quoted (\ " ` $ escaped)
// unless it is made of characters that need none; Parse reads it back.
func Line(key, value string) string {
	return key + "=" + Quote(value) + "\n"
}

// Quote returns v as an environment file value (also fine for a shell's
// "."): as it is when every character is safe, else double-quoted.
func Quote(v string) string {
	safe := v != ""
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:,@%+=-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return v
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		if strings.ContainsRune("\\\"`$", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}
