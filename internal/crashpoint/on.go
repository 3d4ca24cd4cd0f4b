//go:build crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Here kills the process, or hangs it, when the armed point is name.
func Here(name string) {
	path := os.Getenv("ETCDADM_CRASHPOINT_FILE")
	if path == "" {
		path = ArmFile
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	hang, armed := false, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == host || f[0] == "*") && f[1] == name {
			armed, hang = true, len(f) > 2 && f[2] == "hang"
			break
		}
	}
	if !armed {
		return
	}
	fmt.Fprintf(os.Stderr, "CRASHPOINT %s\n", name)
	if !hang {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	for { // until the power is cut (or the kill lands)
		time.Sleep(time.Hour)
	}
}
