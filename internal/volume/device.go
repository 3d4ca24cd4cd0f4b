package volume

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// probe is what blkid found on a device.
type probe struct {
	Blank  bool
	Type   string // file system, "" if none
	PTType string // partition table, "" if none
	Label  string
}

// probeDevice looks for any signature on dev: blkid's low-level probe
// (file systems, RAID, LUKS, partition tables), then the first MiB must
// read as zeros, so data blkid does not know is not taken for blank
// either.
func probeDevice(ctx context.Context, dev string) (probe, error) {
	out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "export", dev).Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		var p probe
		for _, line := range strings.Split(string(out), "\n") {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "TYPE":
				p.Type = v
			case "PTTYPE":
				p.PTType = v
			case "LABEL":
				p.Label = v
			}
		}
		if p.Type == "" && p.PTType == "" {
			// Something blkid recognised but we do not (e.g. a
			// partition entry): not blank.
			p.Type = "unknown"
		}
		return p, nil
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		// blkid found nothing; check the bytes ourselves.
	case errors.As(err, &ee):
		return probe{}, fmt.Errorf("blkid -p %s: exit %d: %s", dev, ee.ExitCode(), bytes.TrimSpace(ee.Stderr))
	default:
		return probe{}, fmt.Errorf("blkid -p %s: %w", dev, err)
	}
	f, err := os.Open(dev)
	if err != nil {
		return probe{}, fmt.Errorf("probe %s: %w", dev, err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return probe{}, fmt.Errorf("probe %s: read the first MiB: %w", dev, err)
	}
	for _, b := range buf[:n] {
		if b != 0 {
			return probe{Type: "unrecognised data"}, nil
		}
	}
	return probe{Blank: true}, nil
}

func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

func mkfs(ctx context.Context, dev, label string) error {
	_, err := run(ctx, "mkfs.ext4", "-q", "-L", label, dev)
	return err
}

// fsck runs a forced e2fsck -f -p (resize2fs refuses an unchecked file
// system; etcd volumes are small, so a full check is quick). Exit 1 and 2 mean errors were corrected; anything
// above is fatal (uncorrected errors, operational failure).
func fsck(ctx context.Context, dev string) (corrected bool, err error) {
	out, err := exec.CommandContext(ctx, "e2fsck", "-f", "-p", dev).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &ee) && ee.ExitCode() > 0 && ee.ExitCode()&^3 == 0:
		return true, nil
	case errors.As(err, &ee):
		return false, fmt.Errorf("%w: e2fsck -f -p %s: exit %d (errors left uncorrected; run e2fsck by hand): %s", ErrFsck, dev, ee.ExitCode(), bytes.TrimSpace(out))
	default:
		return false, fmt.Errorf("%w: e2fsck -f -p %s: %w", ErrFsck, dev, err)
	}
}

// resize grows the unmounted file system to the device: offline, as an
// online resize would need CAP_SYS_RESOURCE too.
func resize(ctx context.Context, dev string) error {
	_, err := run(ctx, "resize2fs", dev)
	return err
}

// blockDev returns dev's device number; dev must be a block device.
func blockDev(dev string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return 0, fmt.Errorf("device %s: %w", dev, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, fmt.Errorf("%w: %s is not a block device", ErrConfig, dev)
	}
	return st.Rdev, nil
}

type mountEntry struct {
	Dev    uint64
	Point  string
	Source string
}

func readMounts(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		maj, min, ok := strings.Cut(fields[2], ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		out = append(out, mountEntry{
			Dev:    unix.Mkdev(uint32(ma), uint32(mi)),
			Point:  UnescapeMount(fields[4]),
			Source: UnescapeMount(fields[sep+2]),
		})
	}
	return out, sc.Err()
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkMounts reports whether dev is already mounted at target (a re-run)
// and refuses, with ErrInUse, a device mounted anywhere else or a target
// holding another file system.
func checkMounts(mountinfo, dev, target string) (mountedHere bool, err error) {
	rdev, err := blockDev(dev)
	if err != nil {
		return false, err
	}
	mounts, err := readMounts(mountinfo)
	if err != nil {
		return false, fmt.Errorf("list mounts: %w", err)
	}
	target = filepath.Clean(target)
	for _, m := range mounts {
		switch {
		case m.Dev == rdev && m.Point == target:
			mountedHere = true
		case m.Dev == rdev:
			return false, fmt.Errorf("%w: %s is already mounted at %s; unmount it first", ErrInUse, dev, m.Point)
		case m.Point == target:
			return false, fmt.Errorf("%w: %s already has %s mounted; unmount it first", ErrInUse, target, m.Source)
		}
	}
	return mountedHere, nil
}
