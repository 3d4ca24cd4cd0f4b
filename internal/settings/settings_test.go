package settings

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The rows of finding 2 (issue 26): a misspelt key, a provider that does
// not exist, a lease under the volume rule, a size that is no size, and a
// duration or number that does not parse are refused, naming the key and
// what it accepts; good values of every kind pass.
func TestCheck(t *testing.T) {
	c := New(Daemons()...)
	for _, tc := range []struct {
		key, value string
		want       []string // "" for accepted
	}{
		{"ETCDADM_VOLUME_PROVIDER", "pool", nil},
		{"ETCDADM_VOLUME_PROVIDER", "none", nil},
		{"ETCDADM_VOLUME_LEASE", "30s", nil},
		{"ETCDADM_VOLUME_SIZE", "512M", nil},
		{"ETCDADM_CERT_VALIDITY", "8760h", nil},
		{"ETCDADM_RETAIN_HOURLY_DAYS", "0", nil},
		{"ETCDADM_FOUND_GRACE", "2m", nil},
		{"ETCDADM_DNS_INTERVAL", "5s", nil},
		{"ETCDADM_INSECURE", "true", nil},
		{"ETCDADM_VOLUME_PROVIDR", "pool", []string{"ETCDADM_VOLUME_PROVIDR", "no binary reads it", "did you mean ETCDADM_VOLUME_PROVIDER?"}},
		{"ETCDADM_NOTHING_LIKE_IT_AT_ALL", "1", []string{"ETCDADM_NOTHING_LIKE_IT_AT_ALL", "no binary reads it"}},
		{"ETCDADM_VOLUME_PROVIDER", "ebs", []string{"ETCDADM_VOLUME_PROVIDER=ebs", "etcd-volume-attach --provider", "want none, local or pool"}},
		{"ETCDADM_VOLUME_LEASE", "5s", []string{"ETCDADM_VOLUME_LEASE=5s", "--lease", "at least"}},
		{"ETCDADM_VOLUME_LEASE", "forever", []string{"ETCDADM_VOLUME_LEASE=forever", "a duration"}},
		{"ETCDADM_VOLUME_SIZE", "lots", []string{"ETCDADM_VOLUME_SIZE=lots", "--size", "a positive size such as 8G"}},
		{"ETCDADM_CERT_VALIDITY", "1m", []string{"ETCDADM_CERT_VALIDITY=1m", "--cert-validity", "want"}},
		{"ETCDADM_RETAIN_DAILY_DAYS", "many", []string{"ETCDADM_RETAIN_DAILY_DAYS=many", "a whole number"}},
		{"ETCDADM_VOLUME_WAIT", "maybe", []string{"true or false"}},
		{"ETCDADM_LOG_LEVEL", "loud", []string{"debug, info, warn or error"}},
	} {
		err := c.Check(tc.key, tc.value)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s=%s: %v, want accepted", tc.key, tc.value, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s=%s accepted, want refused", tc.key, tc.value)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s=%s: %q, want it to say %q", tc.key, tc.value, err, w)
			}
		}
	}
	if err := c.Check("ETCDADM_VOLUME_PROVIDR", "x"); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown key: %v, want ErrUnknown", err)
	}
}

// The process's own environment does not leak into a check.
func TestCheckIgnoresEnvironment(t *testing.T) {
	t.Setenv("ETCDADM_VOLUME_LEASE", "garbage")
	if err := New(Daemons()...).Check("ETCDADM_VOLUME_LEASE", "3m"); err != nil {
		t.Errorf("ETCDADM_VOLUME_LEASE=3m with garbage in the environment: %v", err)
	}
}

// Every binary's flags are walked: the keys the units and the docs use are
// all known.
func TestKeys(t *testing.T) {
	keys := New(Daemons()...).Keys()
	for _, k := range []string{"ETCDADM_STORE", "ETCDADM_VOLUME_PROVIDER", "ETCDADM_VOLUME_LEASE", "ETCDADM_JOIN_TIMEOUT", "ETCDADM_SWITCH_HEALTH_TIMEOUT", "ETCDADM_UPLOAD_TIMEOUT", "ETCDADM_DNS_LEASE", "ETCDADM_CACERT", "ETCDADM_RETAIN_ALL", "ETCDADM_CERT_VALIDITY"} {
		if !slices.Contains(keys, k) {
			t.Errorf("%s is not in the catalogue %v", k, keys)
		}
	}
}

// Every flag of the binaries the units run has its ETCDADM_* variable
// (README: units set them from an EnvironmentFile=), so the catalogue
// render checks against is all of them.
func TestEveryDaemonFlagHasAVariable(t *testing.T) {
	for _, b := range Daemons() {
		for _, f := range b.Flags() {
			if f == nil {
				continue
			}
			ev, ok := f.(interface{ GetEnvVars() []string })
			if !ok || len(ev.GetEnvVars()) == 0 || !strings.HasPrefix(ev.GetEnvVars()[0], "ETCDADM_") {
				t.Errorf("%s --%s reads no ETCDADM_* variable", b.Name, f.Names()[0])
			}
		}
	}
}
