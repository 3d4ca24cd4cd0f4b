// Package alerts holds the Prometheus alerting rules shipped for
// operators (etcdadm-alerts.yml) and their promtool tests; its Go test runs
// promtool and checks the rules name only metrics that our binaries or
// etcd really write.
package alerts
