package volume

import (
	"context"
	"fmt"
	"os"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/coreos/go-systemd/v22/unit"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// Mounter mounts a file system. options is a comma-separated mount(8)
// option list.
type Mounter interface {
	Mount(ctx context.Context, device, target, fstype, options string) error
}

var (
	_ Mounter = PlainMounter{}
	_ Mounter = (*SystemdMounter)(nil)
)

// PlainMounter calls mount(2) in the caller's mount namespace: for tests
// and hosts without systemd.
type PlainMounter struct{}

// mountFlag is the mount(2) flag of a mount option; false for options
// passed on to the file system.
func mountFlag(option string) (uintptr, bool) {
	switch option {
	case "noatime":
		return unix.MS_NOATIME, true
	case "nodev":
		return unix.MS_NODEV, true
	case "nosuid":
		return unix.MS_NOSUID, true
	case "noexec":
		return unix.MS_NOEXEC, true
	case "ro":
		return unix.MS_RDONLY, true
	}
	return 0, false
}

// Mount creates target and mounts device on it.
func (PlainMounter) Mount(_ context.Context, device, target, fstype, options string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	var flags uintptr
	var data []string
	for _, o := range strings.Split(options, ",") {
		if f, ok := mountFlag(o); ok {
			flags |= f
		} else if o != "" && o != "defaults" {
			data = append(data, o)
		}
	}
	if err := unix.Mount(device, target, fstype, flags, strings.Join(data, ",")); err != nil {
		return fmt.Errorf("mount %s on %s: %w", device, target, err)
	}
	return nil
}

// SystemdMounter asks systemd (over D-Bus) for a transient mount unit, so
// the mount lives in the host's namespace, shows up as var-lib-etcd.mount
// and is unmounted in order at shutdown.
type SystemdMounter struct {
	Conn *sd.Conn
}

// Mount starts the transient unit <escaped target>.mount and waits for
// its job's result.
func (m *SystemdMounter) Mount(ctx context.Context, device, target, fstype, options string) error {
	name := unit.UnitNamePathEscape(target) + ".mount"
	props := []sd.Property{
		sd.PropDescription("etcd data volume (etcd-volume-attach)"),
		{Name: "What", Value: dbus.MakeVariant(device)},
		{Name: "Where", Value: dbus.MakeVariant(target)},
		{Name: "Type", Value: dbus.MakeVariant(fstype)},
		{Name: "Options", Value: dbus.MakeVariant(options)},
	}
	ch := make(chan string, 1)
	if _, err := m.Conn.StartTransientUnitContext(ctx, name, "fail", props, ch); err != nil {
		return fmt.Errorf("systemd: start %s: %w", name, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("systemd: start %s: job %s (see: systemctl status %s; journalctl -u %s)", name, res, name, name)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd: start %s: %w", name, ctx.Err())
	}
}
