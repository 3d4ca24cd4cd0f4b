package dns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/filelock"
)

// The managed block's markers. Nothing outside them is ever changed.
const (
	hostsBegin = "# BEGIN etcd-dns-registrar: managed block, edits inside are overwritten"
	hostsEnd   = "# END etcd-dns-registrar"
)

// HostsFile keeps a managed block of member names in a hosts file.
//
// It writes atomically (temp file + fsync + rename, keeping mode and
// owner) when the directory is writable. Under the systemd unit only the
// file itself is writable (ReadWritePaths=/etc/hosts, a bind mount a rename
// cannot replace), so then it rewrites the file in place under an flock:
// one write of the whole content, truncate, fsync.
type HostsFile struct {
	// Path is the hosts file, e.g. <root>/etc/hosts.
	Path string
	// InPlace forces the in-place write (tests).
	InPlace bool
}

var _ Provider = (*HostsFile)(nil)

// Name implements Provider.
func (h *HostsFile) Name() string { return "hosts " + h.Path }

// Sync implements Provider: the block lists every host that has addresses.
// It reports whether the file changed; an unchanged file is not rewritten.
func (h *HostsFile) Sync(ctx context.Context, hosts []Host) (bool, error) {
	old, err := os.ReadFile(h.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: %s: %w", ErrProvider, h.Path, err)
	}
	next, err := ReplaceHostsBlock(old, hosts)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrProvider, h.Path, err)
	}
	if bytes.Equal(old, next) {
		return false, nil
	}
	if err := h.write(ctx, next); err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrProvider, h.Path, err)
	}
	return true, nil
}

// ReplaceHostsBlock returns content with its managed block replaced by one
// listing hosts (or removed, when no host has an address). Lines outside
// the block are kept byte for byte; a new block is appended at the end.
func ReplaceHostsBlock(content []byte, hosts []Host) ([]byte, error) {
	var block strings.Builder
	if hasAddresses(hosts) {
		block.WriteString(hostsBegin + "\n")
		for _, h := range hosts {
			for _, a := range h.Addresses {
				fmt.Fprintf(&block, "%s\t%s\n", a, h.FQDN)
			}
		}
		block.WriteString(hostsEnd + "\n")
	}
	s := string(content)
	begin := indexLine(s, hostsBegin)
	if begin < 0 {
		if block.Len() == 0 {
			return content, nil
		}
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		return []byte(s + block.String()), nil
	}
	endRel := indexLine(s[begin:], hostsEnd)
	if endRel < 0 {
		return nil, fmt.Errorf("managed block begins at byte %d but has no %q line: fix the file by hand", begin, hostsEnd)
	}
	end := begin + endRel + len(hostsEnd)
	if end < len(s) && s[end] == '\n' {
		end++
	}
	return []byte(s[:begin] + block.String() + s[end:]), nil
}

func hasAddresses(hosts []Host) bool {
	for _, h := range hosts {
		if len(h.Addresses) > 0 {
			return true
		}
	}
	return false
}

// indexLine finds line as a whole line of s.
func indexLine(s, line string) int {
	for off := 0; off < len(s); {
		i := strings.Index(s[off:], line)
		if i < 0 {
			return -1
		}
		i += off
		startOK := i == 0 || s[i-1] == '\n'
		j := i + len(line)
		endOK := j == len(s) || s[j] == '\n'
		if startOK && endOK {
			return i
		}
		off = j
	}
	return -1
}

func (h *HostsFile) write(ctx context.Context, b []byte) error {
	mode, uid, gid := fs.FileMode(0o644), -1, -1
	if fi, err := os.Stat(h.Path); err == nil {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if !h.InPlace {
		err := atomicfile.Write(h.Path, b, mode, uid, gid)
		if !dirNotWritable(err) {
			return err
		}
	}
	return writeInPlace(ctx, h.Path, b, mode)
}

// dirNotWritable: the rename route is closed (read-only /etc, or a
// bind-mounted file), so the in-place route is the one left.
func dirNotWritable(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) ||
		errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EXDEV)
}

// writeInPlace rewrites path under an exclusive flock (other registrars
// and well-behaved editors take it too), waiting for it no longer than
// ctx.
func writeInPlace(ctx context.Context, path string, b []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := filelock.Lock(ctx, f); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return err
	}
	return f.Sync()
}
