//go:build !linux

package rollout

import "syscall"

// sysProcAttr: only Linux can tie a child's life to ours; elsewhere
// b.Cleanup alone stops the processes.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
