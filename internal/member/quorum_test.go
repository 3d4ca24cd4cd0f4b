package member

import "testing"

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
