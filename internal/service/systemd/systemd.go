// Package systemd is the service.Manager for real hosts: it controls
// etcd.service through systemd's D-Bus API (no shelling out to systemctl)
// and checks every job's result.
package systemd

import (
	"context"
	"fmt"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/etcdadm/etcdadm-immutable/internal/service"
)

var _ service.Manager = (*Manager)(nil)

// Manager controls one unit.
type Manager struct {
	Conn *sd.Conn
	Unit string // e.g. "etcd.service"
}

// New connects to the system bus. The caller closes Conn.
func New(ctx context.Context, unit string) (*Manager, error) {
	conn, err := sd.NewSystemConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("systemd: connect to the system bus: %w", err)
	}
	return &Manager{Conn: conn, Unit: unit}, nil
}

// job runs one systemd job and waits for its result.
func (m *Manager) job(ctx context.Context, what string, start func(chan<- string) (int, error)) error {
	ch := make(chan string, 1)
	if _, err := start(ch); err != nil {
		return fmt.Errorf("systemd: %s %s: %w", what, m.Unit, err)
	}
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("systemd: %s %s: job %s (see: systemctl status %s; journalctl -u %s)", what, m.Unit, res, m.Unit, m.Unit)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd: %s %s: %w", what, m.Unit, ctx.Err())
	}
}

// Start starts the unit, or restarts it when restart is set.
func (m *Manager) Start(ctx context.Context, restart bool) error {
	if restart {
		return m.job(ctx, "restart", func(ch chan<- string) (int, error) {
			return m.Conn.RestartUnitContext(ctx, m.Unit, "replace", ch)
		})
	}
	return m.job(ctx, "start", func(ch chan<- string) (int, error) {
		return m.Conn.StartUnitContext(ctx, m.Unit, "replace", ch)
	})
}

// Stop stops the unit.
func (m *Manager) Stop(ctx context.Context) error {
	return m.job(ctx, "stop", func(ch chan<- string) (int, error) {
		return m.Conn.StopUnitContext(ctx, m.Unit, "replace", ch)
	})
}

// Active reports whether the unit is active.
func (m *Manager) Active(ctx context.Context) (bool, error) {
	p, err := m.Conn.GetUnitPropertyContext(ctx, m.Unit, "ActiveState")
	if err != nil {
		return false, fmt.Errorf("systemd: %s: %w", m.Unit, err)
	}
	return p.Value.Value() == "active", nil
}

// Reload makes systemd re-read unit files (after a drop-in changed).
func (m *Manager) Reload(ctx context.Context) error {
	if err := m.Conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("systemd: daemon-reload: %w", err)
	}
	return nil
}
