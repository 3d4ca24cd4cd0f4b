package dns

import "context"

// Provider makes names resolve. Sync is given every known name: those with
// addresses must resolve to exactly them, those without must not resolve.
// It reports whether it changed anything; it must be safe to repeat.
type Provider interface {
	Name() string
	Sync(ctx context.Context, hosts []Host) (changed bool, err error)
}
