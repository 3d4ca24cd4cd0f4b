package ignition

import "fmt"

// reservedEnv names the option that sets key, for the keys Env may not
// set; "" for the others.
func reservedEnv(key string) string {
	switch key {
	case "ETCDADM_STORE":
		return "--store"
	case "ETCDADM_LOG_LEVEL":
		return "--host-log-level"
	case "ETCDADM_MEMBER_NAME":
		return "--name (it is per host: host.env)"
	case "ETCDADM_HOST":
		return "--host (it is per host: host.env)"
	case "ETCDADM_IPS":
		return "--ip (it is per host: host.env)"
	}
	return ""
}

// checkEnvValue refuses what an environment file cannot carry.
func checkEnvValue(v string) error {
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("value %q holds a control character (newline?)", v)
		}
	}
	return nil
}
