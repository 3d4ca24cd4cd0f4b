package member

import (
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Remove removes the member named (or with the hex ID) target, refusing
// when the healthy voting members left would be fewer than the quorum of
// the smaller cluster. It returns the removed member's name.
func Remove(ctx context.Context, cli *clientv3.Client, target string) (string, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("member remove: %w", err)
	}
	id, idErr := strconv.ParseUint(target, 16, 64)
	var victim *clientv3.Member
	for _, m := range ml.Members {
		if m.Name == target || (idErr == nil && m.ID == id) {
			victim = (*clientv3.Member)(m)
		}
	}
	if victim == nil {
		return "", fmt.Errorf("member remove: no member %q (see 'etcdadm member list')", target)
	}
	if !victim.IsLearner {
		voters, healthy := Left(ml.Members, victim.ID, func(m *etcdserverpb.Member) bool { _, err := MemberStatus(ctx, cli, m); return err == nil })
		if need, ok := QuorumAfter(voters, healthy); !ok {
			return "", fmt.Errorf("member remove: %w: without %s, %d of %d members are healthy, %d needed", ErrUnsafe, target, healthy, voters, need)
		}
	}
	if _, err := cli.MemberRemove(ctx, victim.ID); err != nil {
		return "", fmt.Errorf("member remove %s: %w", target, err)
	}
	name := victim.Name
	if name == "" {
		name = fmt.Sprintf("%x", victim.ID)
	}
	return name, nil
}
