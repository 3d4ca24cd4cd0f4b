//go:build linux

package harness

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// loopRange is how many loop devices (/dev/loop0 and up) every host gets
// a node for.
const loopRange = 64

// loopNodeDir holds the test machine's own nodes for loop devices, made
// once and never removed: detaching a loop device (systemd-sysext and
// 'losetup -d' do) removes its /dev/loopN, and a test booting a host
// beside one that just detached would bind a node that is gone.
const loopNodeDir = "/dev/etcdadm-e2e-loop"

// LoopDevices makes sure the test machine has at least free of
// /dev/loop0 to /dev/loop63 unused and returns what HostOptions.Devices
// takes to give a host /dev/loop-control and a node for each of those 64:
// losetup and systemd-sysext inside a host allocate through loop-control,
// but a host's /dev is its own and gets no node for a loop device created
// after it booted. The nodes are bound from loopNodeDir (block devices on
// the test machine's devtmpfs, which the kernel does not remove when a
// device goes), so whatever index LOOP_CTL_GET_FREE hands a host has its
// node, however the other tests attach and detach. Loop devices are
// global, so hosts see each other's attachments, as hosts sharing a SAN
// would.
func LoopDevices(t testing.TB, free int) []string {
	t.Helper()
	shift, err := loopPartShift()
	if err != nil {
		t.Fatalf("harness: loop devices: %v (is the loop module loaded? modprobe loop)", err)
	}
	if err := os.MkdirAll(loopNodeDir, 0o700); err != nil {
		t.Fatalf("harness: loop devices: %v", err)
	}
	devs := []string{"/dev/loop-control"}
	unused := 0
	for i := 0; i < loopRange; i++ {
		node := filepath.Join(loopNodeDir, "loop"+strconv.Itoa(i))
		if err := blockNode(node, unix.Mkdev(7, uint32(i)<<shift)); err != nil {
			t.Fatalf("harness: loop devices: %v", err)
		}
		// A loop device in use has a backing file.
		if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", i)); os.IsNotExist(err) {
			unused++
		}
		devs = append(devs, node+":/dev/loop"+strconv.Itoa(i))
	}
	if unused < free {
		t.Fatalf("harness: loop devices: %d of /dev/loop0-%d unused, want %d (losetup -a lists what holds them)", unused, loopRange-1, free)
	}
	return devs
}

// loopPartShift is how far the loop driver shifts a device's index into
// its minor number: 0 unless the module was loaded with max_part.
func loopPartShift() (int, error) {
	b, err := os.ReadFile("/sys/module/loop/parameters/max_part")
	if err != nil {
		return 0, err
	}
	maxPart, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || maxPart <= 0 {
		return 0, err
	}
	return bits.Len(uint(maxPart)), nil
}

// blockNode makes path a block device node for dev, or checks that it is
// one already (tests running side by side make the same nodes).
func blockNode(path string, dev uint64) error {
	err := unix.Mknod(path, unix.S_IFBLK|0o600, int(dev))
	if err == nil || !errors.Is(err, unix.EEXIST) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != dev {
		return fmt.Errorf("%s is not the block device %d:%d (remove it; the harness makes it again)", path, unix.Major(dev), unix.Minor(dev))
	}
	return nil
}
