package member

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
