package member

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Which removals are refused: the ones that leave fewer healthy members
// than the smaller cluster's quorum.
func TestQuorumAfter(t *testing.T) {
	for _, tc := range []struct {
		voters, healthyLeft, need int
		ok                        bool
	}{
		{1, 1, 1, true},  // 2 -> 1 members, the one left healthy
		{1, 0, 1, false}, // 2 -> 1, the one left is down
		{2, 2, 2, true},  // 3 -> 2, both healthy
		{2, 1, 2, false}, // 3 -> 2 with one down: no quorum
		{3, 2, 2, true},  // 4 -> 3, one down
		{4, 2, 3, false}, // 5 -> 4, two down
		{4, 3, 3, true},  // 5 -> 4, one down
	} {
		need, ok := QuorumAfter(tc.voters, tc.healthyLeft)
		if need != tc.need || ok != tc.ok {
			t.Errorf("QuorumAfter(%d, %d) = %d, %v; want %d, %v", tc.voters, tc.healthyLeft, need, ok, tc.need, tc.ok)
		}
	}
}

// TestLeft: the victim and learners are not counted; health is asked of
// the voters left only.
func TestLeft(t *testing.T) {
	ms := []*etcdserverpb.Member{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4, IsLearner: true}, {ID: 5}}
	down := map[uint64]bool{3: true, 1: true}
	asked := map[uint64]bool{}
	voters, healthy := Left(ms, 1, func(m *etcdserverpb.Member) bool { asked[m.ID] = true; return !down[m.ID] })
	if voters != 3 || healthy != 2 || asked[1] || asked[4] {
		t.Fatalf("Left = %d voters, %d healthy (asked %v); want 3 and 2, neither the victim nor the learner asked", voters, healthy, asked)
	}
}
