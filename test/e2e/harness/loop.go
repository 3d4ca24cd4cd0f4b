//go:build linux

package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

var loopRe = regexp.MustCompile(`^loop([0-9]+)$`)

// LoopDevices makes sure the test machine has at least free unused loop
// devices and returns /dev/loop-control and every /dev/loopN, for
// HostOptions.Devices: losetup inside a host allocates through
// loop-control, but a host's /dev is its own and gets no node for a loop
// device created after it booted. Loop devices are global, so hosts see
// each other's attachments, as hosts sharing a SAN would.
func LoopDevices(t testing.TB, free int) []string {
	t.Helper()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("harness: loop devices: %v (is the loop module loaded? modprobe loop)", err)
	}
	defer ctl.Close()
	unused := 0
	for i := 0; unused < free; i++ {
		if i >= 512 {
			t.Fatalf("harness: loop devices: fewer than %d unused among /dev/loop0-511", free)
		}
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
	}
	devs := []string{"/dev/loop-control"}
	entries, err := os.ReadDir("/dev")
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, e := range entries {
		if m := loopRe.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	for _, n := range nums {
		devs = append(devs, filepath.Join("/dev", "loop"+strconv.Itoa(n)))
	}
	return devs
}
