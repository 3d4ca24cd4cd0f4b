package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// Driver attaches a pool volume's block device to this host. Attach is
// idempotent: a volume already attached returns the same device.
// Implementations: Loopfile; cloud block devices (AWS EBS) later.
type Driver interface {
	Attach(ctx context.Context, volume string) (devicePath string, err error)
	Detach(ctx context.Context, volume string) error
}

var _ Driver = (*Loopfile)(nil)

// Loopfile keeps each volume as a sparse image file <Dir>/<volume>.img
// (on storage every host sees, for a pool) attached with losetup.
type Loopfile struct {
	Dir  string
	Size int64 // bytes; images are created (and grown, never shrunk) to it
	Log  *slog.Logger
}

// Image is the image file of volume.
func (l *Loopfile) Image(volume string) string { return filepath.Join(l.Dir, volume+".img") }

// Attach creates the image if missing, grows it to Size, and attaches it
// to a loop device unless one is attached already.
func (l *Loopfile) Attach(ctx context.Context, volume string) (string, error) {
	if err := CheckName(volume); err != nil {
		return "", err
	}
	img := l.Image(volume)
	grew, err := l.ensureImage(img)
	if err != nil {
		return "", fmt.Errorf("loopfile %s: %w", volume, err)
	}
	devs, err := loopDevices(ctx, img)
	if err != nil {
		return "", fmt.Errorf("loopfile %s: %w", volume, err)
	}
	switch len(devs) {
	case 0:
		out, err := run(ctx, "losetup", "--find", "--show", img)
		if err != nil {
			return "", fmt.Errorf("loopfile %s: %w", volume, err)
		}
		dev := strings.TrimSpace(string(out))
		l.log().Info("attached image", "image", img, "device", dev)
		return dev, nil
	case 1:
		if grew {
			if _, err := run(ctx, "losetup", "--set-capacity", devs[0]); err != nil {
				return "", fmt.Errorf("loopfile %s: %w", volume, err)
			}
		}
		return devs[0], nil
	default:
		return "", fmt.Errorf("loopfile %s: %w: %s is attached to %s; detach all but one", volume, ErrInUse, img, strings.Join(devs, ", "))
	}
}

func (l *Loopfile) log() *slog.Logger {
	if l.Log != nil {
		return l.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (l *Loopfile) ensureImage(img string) (grew bool, err error) {
	if l.Size <= 0 {
		return false, fmt.Errorf("%w: loopfile size must be positive", ErrConfig)
	}
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(img, os.O_RDWR, 0)
	} else if err == nil {
		l.log().Info("created sparse image", "image", img, "size", l.Size)
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if st.Size() >= l.Size {
		return false, nil
	}
	if err := f.Truncate(l.Size); err != nil {
		return false, err
	}
	return st.Size() > 0, f.Close()
}

// Detach detaches every loop device of volume's image.
func (l *Loopfile) Detach(ctx context.Context, volume string) error {
	if err := DetachImage(ctx, l.Image(volume)); err != nil {
		return fmt.Errorf("loopfile %s: %w", volume, err)
	}
	return nil
}

// DetachImage detaches every loop device backed by the image file img.
func DetachImage(ctx context.Context, img string) error {
	devs, err := loopDevices(ctx, img)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if _, err := run(ctx, "losetup", "--detach", d); err != nil {
			return err
		}
	}
	return nil
}

// loopDevices lists the loop devices backed by img.
func loopDevices(ctx context.Context, img string) ([]string, error) {
	out, err := run(ctx, "losetup", "--noheadings", "--output", "NAME", "--associated", img)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
