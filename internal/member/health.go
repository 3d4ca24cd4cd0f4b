package member

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// StatusTimeout bounds one member's status call: a member that takes
// longer counts as not healthy.
const StatusTimeout = 2 * time.Second

// MemberStatus is the health probe: the first of m's client URLs whose
// status answers within StatusTimeout with no errors (an alarm, a
// corrupt member). The one rule for "this member is healthy".
func MemberStatus(ctx context.Context, cli *clientv3.Client, m *etcdserverpb.Member) (*clientv3.StatusResponse, error) {
	if len(m.ClientURLs) == 0 {
		return nil, fmt.Errorf("member %s has no client URL (never started)", m.Name)
	}
	var errs []error
	for _, ep := range m.ClientURLs {
		sctx, cancel := context.WithTimeout(ctx, StatusTimeout)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err == nil && len(st.Errors) > 0 {
			err = fmt.Errorf("%s reports %v", ep, st.Errors)
		}
		if err == nil {
			return st, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
