package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
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
	// Settle: for this long after start, rounds come every 5 s (or more
	// often: every Interval or Settle/4, if shorter), so hosts booted
	// together learn each other's names in seconds, not an Interval
	// (0 = 2 min).
	Settle time.Duration
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
	if c.Lease < 6*c.Interval {
		errs = append(errs, fmt.Errorf("%w: --lease %s must be at least 6 x --interval %s: a record is renewed when a third of its lease is left, and two rounds must fall in that third", ErrInvalid, c.Lease, c.Interval))
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
	settle := cfg.Settle
	if settle <= 0 {
		settle = 2 * time.Minute
	}
	settled := now().Add(settle)
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
		if now().Before(settled) {
			wait = min(wait, 5*time.Second, settle/4)
		}
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

// round: read the registry, renew our record when it changed or a third
// of its lease is left, sync the provider. A round costs one store read;
// a write every two thirds of the lease, or when an address changes.
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
	recs, err := r.publish(ctx, self, now)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrStore, err))
		recs = r.last // keep serving what we knew rather than dropping names
	} else {
		recs = keepLive(recs, r.last, now)
		r.last = recs
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

// publish reads the registry and writes self into it when our record is
// missing, names other addresses, or has a third of its lease left;
// another host's write in between is read again (a few times). It returns
// the registry as read or written.
func (r *registrar) publish(ctx context.Context, self Record, now time.Time) ([]Record, error) {
	for attempt := 0; ; attempt++ {
		recs, bad, etag, err := Load(ctx, r.st)
		if err != nil {
			return nil, err
		}
		for _, b := range bad {
			r.log.Warn("ignoring what cannot be read in the registry", "entry", b)
		}
		if !r.due(recs, self, now, len(bad) > 0) {
			return recs, nil
		}
		written, _, err := Publish(ctx, r.st, recs, etag, self, now.Add(-r.cfg.Lease))
		if err == nil {
			return written, nil
		}
		if !errors.Is(err, store.ErrPrecondition) || attempt == 3 {
			return nil, err
		}
	}
}

// due reports whether our record must be written: missing, different
// addresses, a third of the lease or less left, or a registry that needs
// repair.
func (r *registrar) due(recs []Record, self Record, now time.Time, repair bool) bool {
	if repair {
		return true
	}
	for _, x := range recs {
		if x.Name == self.Name {
			return !slices.Equal(x.Addresses, self.Addresses) || x.Expires.Sub(now) <= r.cfg.Lease/3
		}
	}
	return true
}

// keepLive adds to recs the records of last that are missing from them
// and still live: a name leaves DNS when its record expires, not when it
// goes missing from the registry (an unreadable registry is rewritten by
// the first host with only its own record; the others follow within a
// round, and their names must resolve meanwhile).
func keepLive(recs, last []Record, now time.Time) []Record {
	for _, x := range last {
		if x.Live(now) && !hasName(recs, x.Name) {
			recs = append(recs, x)
		}
	}
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
	return recs
}

func hasName(recs []Record, name string) bool {
	for _, r := range recs {
		if r.Name == name {
			return true
		}
	}
	return false
}
