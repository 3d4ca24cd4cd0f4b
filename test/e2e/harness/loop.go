//go:build linux

package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// loopRange is how many loop devices (/dev/loop0 and up) every host gets
// a node for.
const loopRange = 64

// LoopDevices makes sure the test machine has /dev/loop0 to
// /dev/loop63, at least free of them unused, and returns /dev/loop-control
// and those nodes, for HostOptions.Devices: losetup and systemd-sysext
// inside a host allocate through loop-control, but a host's /dev is its own
// and gets no node for a loop device created after it booted. The range is
// fixed because a detached device is removed (systemd-sysext and
// 'losetup -d' remove it) and LOOP_CTL_GET_FREE then hands out the lowest
// free index, removed or not: within the range, every index a host is
// handed has its node. Loop devices are global, so hosts see each other's
// attachments, as hosts sharing a SAN would.
func LoopDevices(t testing.TB, free int) []string {
	t.Helper()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("harness: loop devices: %v (is the loop module loaded? modprobe loop)", err)
	}
	defer ctl.Close()
	devs := []string{"/dev/loop-control"}
	unused := 0
	for i := 0; i < loopRange; i++ {
		dev := "/dev/loop" + strconv.Itoa(i)
		if _, err := os.Stat(dev); os.IsNotExist(err) {
			if err := unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_ADD, i); err != nil && err != unix.EEXIST {
				t.Fatalf("harness: loop devices: LOOP_CTL_ADD %d: %v", i, err)
			}
		}
		// A loop device in use has a backing file.
		if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", i)); os.IsNotExist(err) {
			unused++
		}
		devs = append(devs, dev)
	}
	if unused < free {
		t.Fatalf("harness: loop devices: %d of /dev/loop0-%d unused, want %d (losetup -a lists what holds them)", unused, loopRange-1, free)
	}
	return devs
}

// ensureLoopNodes adds back the loop devices of devs (as LoopDevices
// returned them) that were removed since: another test on this machine
// that detached one removed it, and nspawn refuses to bind a node that
// is gone.
func ensureLoopNodes(devs []string) error {
	var ctl *os.File
	for _, dev := range devs {
		n, ok := strings.CutPrefix(dev, "/dev/loop")
		i, err := strconv.Atoi(n)
		if !ok || err != nil {
			continue
		}
		if _, err := os.Stat(dev); !os.IsNotExist(err) {
			continue
		}
		if ctl == nil {
			if ctl, err = os.OpenFile("/dev/loop-control", os.O_RDWR, 0); err != nil {
				return fmt.Errorf("loop devices: %w", err)
			}
			defer ctl.Close()
		}
		if err := unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_ADD, i); err != nil && err != unix.EEXIST {
			return fmt.Errorf("loop devices: LOOP_CTL_ADD %d: %w", i, err)
		}
	}
	return nil
}
