package systemd

import (
	"context"
	"fmt"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// UnitState is what `systemctl status` would show first for one unit.
type UnitState struct {
	Name        string    `json:"name"`
	Active      string    `json:"active"` // active, inactive, failed, activating, ...
	Sub         string    `json:"sub"`    // running, exited, waiting, dead, ...
	Result      string    `json:"result,omitempty"`
	LastTrigger time.Time `json:"lastTrigger,omitzero"` // timers
	NextElapse  time.Time `json:"nextElapse,omitzero"`  // timers
}

// States reads the state of the named units in one call, plus the last
// and next run of timers.
func States(ctx context.Context, conn *sd.Conn, names []string) ([]UnitState, error) {
	us, err := conn.ListUnitsByNamesContext(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("systemd: list units: %w", err)
	}
	out := make([]UnitState, 0, len(us))
	for _, u := range us {
		s := UnitState{Name: u.Name, Active: u.ActiveState, Sub: u.SubState}
		if len(u.Name) > 6 && u.Name[len(u.Name)-6:] == ".timer" {
			if p, err := conn.GetUnitTypePropertiesContext(ctx, u.Name, "Timer"); err == nil {
				s.LastTrigger = usec(p["LastTriggerUSec"])
				s.NextElapse = usec(p["NextElapseUSecRealtime"])
				if r, ok := p["Result"].(string); ok {
					s.Result = r
				}
			}
		} else if p, err := conn.GetUnitTypePropertyContext(ctx, u.Name, "Service", "Result"); err == nil {
			if r, ok := p.Value.Value().(string); ok {
				s.Result = r
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func usec(v any) time.Time {
	n, ok := v.(uint64)
	if !ok || n == 0 || n == ^uint64(0) {
		return time.Time{}
	}
	return time.UnixMicro(int64(n))
}
