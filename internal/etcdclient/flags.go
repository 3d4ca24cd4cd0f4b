package etcdclient

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// Flags returns the etcd connection flags; endpointsDefault is the default
// for --endpoints.
func Flags(endpointsDefault string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoints", Value: endpointsDefault, EnvVars: []string{"ETCDADM_ENDPOINTS"}, Usage: "etcd client URLs, comma separated"},
		&cli.StringFlag{Name: "cacert", Value: "/etc/etcd/pki/ca.crt", EnvVars: []string{"ETCDADM_CACERT"}, Usage: "CA bundle that signed the etcd server certificates"},
		&cli.StringFlag{Name: "cert", Value: "/etc/etcd/pki/client.crt", EnvVars: []string{"ETCDADM_CERT"}, Usage: "client certificate for mutual TLS"},
		&cli.StringFlag{Name: "key", Value: "/etc/etcd/pki/client.key", EnvVars: []string{"ETCDADM_KEY"}, Usage: "client key for mutual TLS"},
		&cli.BoolFlag{Name: "insecure", EnvVars: []string{"ETCDADM_INSECURE"}, Usage: "talk plaintext http to etcd, without client certificates (test clusters only)"},
		&cli.DurationFlag{Name: "dial-timeout", Value: 5 * time.Second, EnvVars: []string{"ETCDADM_DIAL_TIMEOUT"}, Usage: "how long to wait for etcd to answer"},
	}
}

// FromFlags reads the etcd flags.
func FromFlags(c *cli.Context) Config {
	cfg := Config{
		Endpoints:   splitList(c.String("endpoints")),
		Insecure:    c.Bool("insecure"),
		DialTimeout: c.Duration("dial-timeout"),
	}
	if !cfg.Insecure || strings.Contains(c.String("endpoints"), "https://") {
		cfg.CACert, cfg.Cert, cfg.Key = c.String("cacert"), c.String("cert"), c.String("key")
	}
	return cfg
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
