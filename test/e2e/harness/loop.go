//go:build linux

package harness

import (
	"fmt"
	"os"
	"strconv"
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
