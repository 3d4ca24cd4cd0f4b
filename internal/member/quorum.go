package member

import "go.etcd.io/etcd/api/v3/etcdserverpb"

// Quorum is how many of n voting members must agree: a majority.
func Quorum(n int) int { return n/2 + 1 }

// QuorumAfter is the one check before removing a voting member: voters
// are the voting members left after the removal, healthyLeft the healthy
// ones among them. need is the quorum of that smaller cluster; ok is false
// when the removal would leave fewer healthy members than that.
func QuorumAfter(voters, healthyLeft int) (need int, ok bool) {
	need = Quorum(voters)
	return need, healthyLeft >= need
}

// Left counts what removing the member victim leaves for QuorumAfter:
// the voting members other than it, and the healthy ones among them.
func Left(members []*etcdserverpb.Member, victim uint64, healthy func(*etcdserverpb.Member) bool) (voters, healthyLeft int) {
	for _, m := range members {
		if m.IsLearner || m.ID == victim {
			continue
		}
		voters++
		if healthy(m) {
			healthyLeft++
		}
	}
	return voters, healthyLeft
}
