// Package service defines how member join controls the local etcd
// process: through systemd over D-Bus on a host (package systemd), or as a
// child process in tests and the local demo (package process).
package service

import "context"

// Manager starts and stops the local etcd, which reads its settings from
// the environment file member join writes.
type Manager interface {
	// Start starts etcd, or restarts it when it runs with settings older
	// than the environment file (restart is true). It returns once the
	// start job has finished, with its result checked.
	Start(ctx context.Context, restart bool) error
	// Stop stops etcd and waits until it has exited.
	Stop(ctx context.Context) error
	// Active reports whether etcd is running.
	Active(ctx context.Context) (bool, error)
}
