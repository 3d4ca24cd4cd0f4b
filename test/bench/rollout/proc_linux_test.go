package rollout

import "syscall"

// sysProcAttr kills an etcd this benchmark started when the test binary
// dies (a -timeout panics it), so none outlives the run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
