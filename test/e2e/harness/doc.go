// Package harness boots throwaway systemd hosts for the end-to-end tests:
// each host is a systemd-nspawn container booting a real systemd from the
// cached Debian rootfs (images/hostroot), with its own network namespace
// plugged into a test "switch" (a bridge in a namespace of its own), an
// overlayfs root over the shared rootfs, and optionally an Ignition config
// applied to that root by the real ignition-apply before boot. Only
// _test.go files under test/e2e may import it.
//
// Everything the harness makes (namespaces, veths, overlay mounts, cgroups,
// processes, work directories) carries the network's random ID
// ("e2e-<id>-...", /tmp/etcdadm-e2e-<id>) and is removed by t.Cleanup, also
// when the test fails. A run that died before its cleanups (a test timeout,
// a kill) leaves an owner record under /run/etcdadm-e2e whose process is
// gone: NewNetwork sweeps such leftovers (see Sweep), and never touches the
// hosts of a run that is still alive.
//
// Requirements: root, systemd-nspawn (Debian systemd-container), iproute2,
// nsenter, and the components `make components` builds (as root) into the
// cache ($ETCDADM_CACHE, else $XDG_CACHE_HOME/etcdadm, else
// ~/.cache/etcdadm): hostroot/bookworm (the rootfs) and bin/ignition-apply.
// A missing piece fails the test with the command that fixes it.
//
// # Entering a host by hand while a test runs
//
// Boot logs a line per host with its container PID 1, for example
//
//	harness: host "a" (10.77.0.1) running after 612ms; enter it with: nsenter -t 4242 -a /bin/bash
//
// Run that command in another shell (as root) while the test runs:
// systemctl, journalctl and ip work inside as on any host. machinectl and
// `systemctl -M` do not (the hosts are not registered with machined). To
// look at the network from the switch: `ip netns exec e2e-<id>-sw bridge
// link`; a host's network namespace is e2e-<id>-<name>. The overlay root
// of a host is visible from outside at /tmp/etcdadm-e2e-<id>/<name>/root
// and its console at .../<name>/console.log.
//
// To keep the hosts of a failed test up for a look, set
// ETCDADM_E2E_HOLD to a duration (and raise go test's -timeout): the
// cleanup then waits that long, or until the file it names is removed,
// before tearing the hosts down.
package harness
