package etcdversion

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// renamed are the ETCD_EXPERIMENTAL_* settings 3.6 gave a plain name and
// 3.7 removed (etcd 3.6's etcdmain/config.go deprecation table).
func renamedSettings() map[string]string {
	return map[string]string{
		"ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME":              "ETCD_COMPACT_HASH_CHECK_TIME",
		"ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME":                   "ETCD_CORRUPT_CHECK_TIME",
		"ETCD_EXPERIMENTAL_COMPACTION_BATCH_LIMIT":               "ETCD_COMPACTION_BATCH_LIMIT",
		"ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL":       "ETCD_WATCH_PROGRESS_NOTIFY_INTERVAL",
		"ETCD_EXPERIMENTAL_WARNING_APPLY_DURATION":               "ETCD_WARNING_APPLY_DURATION",
		"ETCD_EXPERIMENTAL_BOOTSTRAP_DEFRAG_THRESHOLD_MEGABYTES": "ETCD_BOOTSTRAP_DEFRAG_THRESHOLD_MEGABYTES",
		"ETCD_EXPERIMENTAL_MEMORY_MLOCK":                         "ETCD_MEMORY_MLOCK",
		"ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES":             "ETCD_SNAPSHOT_CATCHUP_ENTRIES",
		"ETCD_EXPERIMENTAL_COMPACTION_SLEEP_INTERVAL":            "ETCD_COMPACTION_SLEEP_INTERVAL",
		"ETCD_EXPERIMENTAL_DOWNGRADE_CHECK_TIME":                 "ETCD_DOWNGRADE_CHECK_TIME",
		"ETCD_EXPERIMENTAL_PEER_SKIP_CLIENT_SAN_VERIFICATION":    "ETCD_PEER_SKIP_CLIENT_SAN_VERIFICATION",
		"ETCD_EXPERIMENTAL_WARNING_UNARY_REQUEST_DURATION":       "ETCD_WARNING_UNARY_REQUEST_DURATION",
		"ETCD_EXPERIMENTAL_ENABLE_DISTRIBUTED_TRACING":           "ETCD_ENABLE_DISTRIBUTED_TRACING",
		"ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_ADDRESS":          "ETCD_DISTRIBUTED_TRACING_ADDRESS",
		"ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_SERVICE_NAME":     "ETCD_DISTRIBUTED_TRACING_SERVICE_NAME",
		"ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_INSTANCE_ID":      "ETCD_DISTRIBUTED_TRACING_INSTANCE_ID",
		"ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_SAMPLING_RATE":    "ETCD_DISTRIBUTED_TRACING_SAMPLING_RATE",
	}
}

// gated are the ETCD_EXPERIMENTAL_* booleans that became feature gates.
func gatedSettings() map[string]string {
	return map[string]string{
		"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK":             "InitialCorruptCheck",
		"ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED":        "CompactHashCheck",
		"ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER": "TxnModeWriteWithSharedBuffer",
		"ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT":           "LeaseCheckpoint",
		"ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT_PERSIST":   "LeaseCheckpointPersist",
		"ETCD_EXPERIMENTAL_STOP_GRPC_SERVICE_ON_DEFRAG":       "StopGRPCServiceOnDefrag",
	}
}

// corruptionChecks are etcd's own corruption checks, off by default in
// every version we run: the hash comparison with the peers before a member
// with data serves (InitialCorruptCheck), and the leader's comparison of
// the followers' hashes after each compaction (CompactHashCheck). 3.5 has
// only the experimental flags, 3.6 both spellings (but refuses a flag and
// its gate together), 3.7 only the gates (etcd's embed/config.go and
// features/etcd_features.go of each version).
func corruptionChecks() []string {
	return []string{"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED"}
}

// removedIn36 are settings etcd 3.6 refuses to start with.
func removedIn36() []string { return []string{"ETCD_ENABLE_V2", "ETCD_EXPERIMENTAL_ENABLE_V2V3"} }

// Env rewrites etcd's environment settings for version v: settings v no
// longer accepts are translated to their new name (3.7: the plain name or
// a feature gate) or back to the experimental one (3.5 knows no plain
// names), or dropped when they have no equivalent; from 3.6 an
// experimental flag that has a feature gate is written as the gate (3.6
// deprecates the flag and refuses it next to its gate). Then etcd's
// corruption checks are turned on in v's spelling, unless the settings
// already say (the operator may turn them off). notes say what changed,
// for the journal. The input is not modified.
//
// Member join and the version switcher both write etcd.env through Env,
// so for one version they write the same file whatever it held before: a
// member-join run after a switch restarts nothing.
func Env(v Version, in map[string]string) (out map[string]string, notes []string) {
	out = maps.Clone(in)
	if v.Minor >= 6 {
		for _, k := range removedIn36() {
			if _, ok := out[k]; ok {
				delete(out, k)
				notes = append(notes, fmt.Sprintf("dropped %s: etcd %s has no v2 API", k, v.MinorString()))
			}
		}
	}
	gates := parseGates(out["ETCD_FEATURE_GATES"])
	renamed, gated := renamedSettings(), gatedSettings()
	for _, old := range slices.Sorted(maps.Keys(renamed)) {
		plain := renamed[old]
		switch {
		case v.Minor >= 7:
			if val, ok := out[old]; ok {
				delete(out, old)
				if _, set := out[plain]; !set {
					out[plain] = val
				}
				notes = append(notes, fmt.Sprintf("%s is %s in etcd %s", old, plain, v.MinorString()))
			}
		case v.Minor <= 5:
			if val, ok := out[plain]; ok {
				delete(out, plain)
				if _, set := out[old]; !set {
					out[old] = val
				}
				notes = append(notes, fmt.Sprintf("%s is %s in etcd %s", plain, old, v.MinorString()))
			}
		}
	}
	for _, old := range slices.Sorted(maps.Keys(gated)) {
		gate := gated[old]
		switch {
		case v.Minor >= 6:
			if val, ok := out[old]; ok {
				delete(out, old)
				if _, set := gates[gate]; !set {
					gates[gate] = val
				}
				notes = append(notes, fmt.Sprintf("%s is the feature gate %s in etcd %s", old, gate, v.MinorString()))
			}
		case v.Minor <= 5:
			if val, ok := gates[gate]; ok {
				delete(gates, gate)
				if _, set := out[old]; !set {
					out[old] = val
				}
				notes = append(notes, fmt.Sprintf("feature gate %s is %s in etcd %s", gate, old, v.MinorString()))
			}
		}
	}
	if v.Minor >= 7 {
		for _, k := range slices.Sorted(maps.Keys(out)) {
			if strings.HasPrefix(k, "ETCD_EXPERIMENTAL_") {
				delete(out, k)
				notes = append(notes, fmt.Sprintf("dropped %s: etcd %s refuses every experimental setting and this one has no replacement", k, v.MinorString()))
			}
		}
	}
	for _, old := range corruptionChecks() {
		gate := gated[old]
		switch {
		case v.Minor >= 6:
			if _, set := gates[gate]; !set {
				gates[gate] = "true"
			}
		default:
			if _, set := out[old]; !set {
				out[old] = "true"
			}
		}
	}
	if len(gates) > 0 {
		out["ETCD_FEATURE_GATES"] = formatGates(gates)
	} else {
		delete(out, "ETCD_FEATURE_GATES")
	}
	return out, notes
}

func parseGates(s string) map[string]string {
	g := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			g[k] = v
		}
	}
	return g
}

func formatGates(g map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(g)) {
		parts = append(parts, k+"="+g[k])
	}
	return strings.Join(parts, ",")
}
