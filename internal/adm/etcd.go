package adm

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/urfave/cli/v2"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdclient"
)

// etcdClient is the etcd client of a command's flags; every request it
// sends ends within twice --dial-timeout (etcdclient.Bound), so a command
// against a cluster without quorum or an endpoint that does not answer
// ends, and says so (etcdclient.Config.Reach), instead of hanging.
func etcdClient(c *cli.Context) (*clientv3.Client, etcdclient.Config, error) {
	return etcdClientOf(etcdclient.FromFlags(c))
}

func etcdClientOf(cfg etcdclient.Config) (*clientv3.Client, etcdclient.Config, error) {
	cli3, err := etcdclient.New(cfg)
	if err != nil {
		return nil, cfg, err
	}
	return etcdclient.Bound(cli3, etcdclient.CallTimeout(cfg.DialTimeout)), cfg, nil
}
