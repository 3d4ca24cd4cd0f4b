package testenv

import "syscall"

// sysProcAttr kills the child when the test binary dies (a test timeout
// panics it), so no etcd or S3 server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
