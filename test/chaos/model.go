// Package chaos drives a client workload against etcd while faults are
// injected elsewhere, records its history and judges it: porcupine checks
// the history against a key-value model (linearizability), and the
// watches are checked against etcd's own record of every revision.
package chaos

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/anishathalye/porcupine"
)

// Kinds of operation.
const (
	Get = "get"
	Put = "put" // plain, or with the workload's lease
	CAS = "cas" // a txn: if value == Expect then put Value
)

// Input is one operation on one key.
type Input struct {
	Kind   string
	Key    string
	Value  string // put and cas: the value written (unique in the run)
	Expect string // cas: the value compared ("" = the key is absent)
	Lease  bool   // put: with the workload's lease
}

// Output is what etcd answered. Unknown: the request failed in a way
// that leaves open whether it took effect (a timeout, a lost leader); the
// operation then never returns (Return = infinity) and may take effect at
// any point after its call.
type Output struct {
	Value   string // get: "" when absent
	OK      bool   // cas: the comparison held and the put was done
	Unknown bool
}

// Never is the return time of an operation whose outcome is unknown.
const Never = math.MaxInt64

// Model is a register per key: state is the key's value ("" = absent).
// It is nondeterministic only for a cas of unknown outcome whose
// comparison holds: it may or may not have written.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: byKey,
		Init:      func() []any { return []any{""} },
		Step: func(state, in, out any) []any {
			s, i, o := state.(string), in.(Input), out.(Output)
			switch i.Kind {
			case Get:
				if o.Value == s {
					return []any{s}
				}
				return nil
			case Put:
				return []any{i.Value}
			case CAS:
				holds := s == i.Expect
				switch {
				case o.Unknown && holds:
					return []any{i.Value, s}
				case o.Unknown, !holds && !o.OK:
					return []any{s}
				case holds && o.OK:
					return []any{i.Value}
				}
				return nil
			}
			return nil
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(Input), out.(Output)
			res := ""
			switch {
			case o.Unknown:
				res = " → ?"
			case i.Kind == Get:
				res = fmt.Sprintf(" → %q", o.Value)
			case i.Kind == CAS:
				res = fmt.Sprintf(" → %v", o.OK)
			}
			switch i.Kind {
			case Get:
				return fmt.Sprintf("get(%s)%s", i.Key, res)
			case CAS:
				return fmt.Sprintf("cas(%s, %q→%q)%s", i.Key, i.Expect, i.Value, res)
			}
			return fmt.Sprintf("put(%s, %q)%s", i.Key, i.Value, res)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
	}
	return nm.ToModel()
}

func byKey(history []porcupine.Operation) [][]porcupine.Operation {
	parts := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(Input).Key
		parts[k] = append(parts[k], op)
	}
	var out [][]porcupine.Operation
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		out = append(out, parts[k])
	}
	return out
}
