package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Config is what the registrar needs to know about this host.
type Config struct {
	Name string // member name, e.g. "etcd-b"
	// VolumeProvider: etcd-volume-attach's; with local or pool, Name
	// must come from its identity.env (hostaddr.MemberName).
	VolumeProvider string
	Addresses      []netip.Addr // this host's addresses for it
	Suffix         string       // DNS suffix: Name resolves as Name.Suffix
	Interval       time.Duration
	Lease          time.Duration
	// MaxBackoff bounds the wait after a failed round (0 = Interval).
	MaxBackoff time.Duration
	// OpTimeout bounds one round's store and DNS calls (0 = 20s).
	OpTimeout   time.Duration
	MetricsFile string // Prometheus textfile, "" = none
}

// Validate reports what is wrong with the configuration.
func (c Config) Validate() error {
	var errs []error
	if err := CheckName(c.Name); err != nil {
		errs = append(errs, err)
	}
	if len(c.Addresses) == 0 {
		errs = append(errs, fmt.Errorf("%w: no address to publish (--address)", ErrInvalid))
	}
	for _, a := range c.Addresses {
		if !a.IsValid() || a.IsUnspecified() {
			errs = append(errs, fmt.Errorf("%w: address %s cannot be published", ErrInvalid, a))
		}
	}
	if c.Suffix == "" {
		errs = append(errs, fmt.Errorf("%w: no DNS suffix (--dns-suffix, or dnsSuffix in the store's settings)", ErrInvalid))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("%w: --interval must be positive", ErrInvalid))
	}
	if c.Lease < 2*c.Interval {
		errs = append(errs, fmt.Errorf("%w: --lease %s must be at least twice --interval %s, or a live host's record expires between renewals", ErrInvalid, c.Lease, c.Interval))
	}
	return errors.Join(errs...)
}

// Notifier receives sd_notify states ("READY=1", "STATUS=...", "WATCHDOG=1").
type Notifier interface {
	Notify(state string)
}

// NotifyFunc adapts a function to Notifier.
type NotifyFunc func(state string)

// Notify implements Notifier.
func (f NotifyFunc) Notify(state string) { f(state) }

// Status is the outcome of the last round, for STATUS= and the metrics.
type Status struct {
	Degraded    bool
	Err         error
	Published   int       // names that resolve (live records)
	LastSuccess time.Time // end of the last fully successful round
	Changed     bool
}

func (s Status) line() string {
	if s.Degraded {
		return fmt.Sprintf("degraded: %v; %d names published (last success %s)", s.Err, s.Published, fmtTime(s.LastSuccess))
	}
	return fmt.Sprintf("ok: %d names published", s.Published)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// Run publishes and syncs every Interval until ctx ends. Failures of the
// store or the provider never stop it: the round is retried with a bounded
// backoff and the daemon reports itself degraded. The watchdog is fed only
// between rounds, and rounds are bounded by OpTimeout, so a hung round
// gets the service restarted. It returns nil when ctx ends.
func Run(ctx context.Context, cfg Config, st store.Store, p Provider, n Notifier, log *slog.Logger, watchdog time.Duration, now func() time.Time) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if n == nil {
		n = NotifyFunc(func(string) {})
	}
	r := &registrar{cfg: cfg, st: st, p: p, log: log, now: now, seen: map[string]bool{}}
	maxBackoff := cfg.MaxBackoff
	if maxBackoff <= 0 || maxBackoff > cfg.Interval {
		maxBackoff = cfg.Interval
	}
	var wdTick <-chan time.Time
	if watchdog > 0 {
		t := time.NewTicker(watchdog / 2)
		defer t.Stop()
		wdTick = t.C
	}
	backoff := time.Second
	ready := false
	for {
		s := r.round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !ready {
			n.Notify("READY=1")
			ready = true
		}
		n.Notify("STATUS=" + s.line())
		n.Notify("WATCHDOG=1")
		if cfg.MetricsFile != "" {
			if err := WriteMetrics(cfg.MetricsFile, s); err != nil {
				log.Warn("could not write metrics", "err", err)
			}
		}
		wait := cfg.Interval
		if s.Degraded {
			log.Warn("round failed, retrying", "err", s.Err, "in", backoff)
			wait, backoff = backoff, min(2*backoff, maxBackoff)
		} else {
			backoff = time.Second
		}
		timer := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-wdTick:
				n.Notify("WATCHDOG=1")
			case <-timer.C:
				break waiting
			}
		}
	}
}

type registrar struct {
	cfg  Config
	st   store.Store
	p    Provider
	log  *slog.Logger
	now  func() time.Time
	seen map[string]bool // every name this process saw: gone ones are removed
	last []Record        // last registry read, used while the store is down
	stat Status
}

// round: renew our lease, read the registry, sync the provider.
func (r *registrar) round(ctx context.Context) Status {
	opTimeout := r.cfg.OpTimeout
	if opTimeout <= 0 {
		opTimeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var errs []error
	now := r.now()
	self := Record{Name: r.cfg.Name, Addresses: r.cfg.Addresses, Updated: now.UTC(), Expires: now.Add(r.cfg.Lease).UTC()}
	if err := Publish(ctx, r.st, self); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrStore, err))
	}
	recs, bad, err := Records(ctx, r.st)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrStore, err))
		recs = r.last // keep serving what we knew rather than dropping names
	} else {
		r.last = recs
	}
	for _, b := range bad {
		r.log.Warn("ignoring unreadable registry entry", "key", b)
	}
	if !hasName(recs, self.Name) {
		recs = append(recs, self) // resolve ourselves even before the store answers
	}
	hosts := Hosts(recs, r.cfg.Suffix, now)
	names := map[string]bool{}
	for _, h := range hosts {
		names[h.FQDN] = true
	}
	for fqdn := range r.seen {
		if !names[fqdn] {
			hosts = append(hosts, Host{FQDN: fqdn}) // deleted from the store: remove it too
		}
	}
	published := 0
	for _, h := range hosts {
		r.seen[h.FQDN] = true
		if len(h.Addresses) > 0 {
			published++
		}
	}
	changed, err := r.p.Sync(ctx, hosts)
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, h := range hosts {
			if len(h.Addresses) == 0 && !names[h.FQDN] {
				delete(r.seen, h.FQDN)
			}
		}
		if changed {
			r.log.Info("published", "provider", r.p.Name(), "names", published)
		}
	}
	s := Status{Published: published, LastSuccess: r.stat.LastSuccess, Changed: changed}
	if len(errs) > 0 {
		s.Degraded, s.Err = true, errors.Join(errs...)
	} else {
		s.LastSuccess = r.now()
	}
	r.stat = s
	return s
}

func hasName(recs []Record, name string) bool {
	for _, r := range recs {
		if r.Name == name {
			return true
		}
	}
	return false
}
