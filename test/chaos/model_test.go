package chaos

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

func op(in Input, out Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{Input: in, Output: out, Call: call, Return: ret}
}

// The model accepts what etcd may answer and rejects what it must not.
func TestModel(t *testing.T) {
	put := func(k, v string) Input { return Input{Kind: Put, Key: k, Value: v} }
	get := func(k string) Input { return Input{Kind: Get, Key: k} }
	cas := func(k, expect, v string) Input { return Input{Kind: CAS, Key: k, Expect: expect, Value: v} }
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"read your write", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(get("a"), Output{Value: "1"}, 20, 30)}, porcupine.Ok},
		{"stale read", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(put("a", "2"), Output{}, 11, 12), op(get("a"), Output{Value: "1"}, 20, 30)}, porcupine.Illegal},
		{"lost acknowledged write", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(get("a"), Output{}, 20, 30)}, porcupine.Illegal},
		{"concurrent read sees either", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(put("a", "2"), Output{}, 5, 25), op(get("a"), Output{Value: "1"}, 20, 30)}, porcupine.Ok},
		{"unknown put shows up later", []porcupine.Operation{op(put("a", "1"), Output{Unknown: true}, 0, Never), op(get("a"), Output{}, 20, 30), op(get("a"), Output{Value: "1"}, 40, 50)}, porcupine.Ok},
		{"unknown put cannot be undone", []porcupine.Operation{op(put("a", "1"), Output{Unknown: true}, 0, Never), op(get("a"), Output{Value: "1"}, 20, 30), op(get("a"), Output{}, 40, 50)}, porcupine.Illegal},
		{"cas on absent key", []porcupine.Operation{op(cas("a", "", "1"), Output{OK: true}, 0, 10), op(get("a"), Output{Value: "1"}, 20, 30)}, porcupine.Ok},
		{"cas refused though it held", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(cas("a", "1", "2"), Output{OK: false}, 20, 30)}, porcupine.Illegal},
		{"cas done though it failed", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(cas("a", "x", "2"), Output{OK: true}, 20, 30)}, porcupine.Illegal},
		{"unknown cas either way", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(cas("a", "1", "2"), Output{Unknown: true}, 20, Never), op(get("a"), Output{Value: "1"}, 40, 50)}, porcupine.Ok},
		{"keys are independent", []porcupine.Operation{op(put("a", "1"), Output{}, 0, 10), op(get("b"), Output{}, 20, 30)}, porcupine.Ok},
	} {
		if got := porcupine.CheckOperationsTimeout(Model(), tc.ops, 0); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestCompareWatch(t *testing.T) {
	history := []Event{{Rev: 5, Key: "a"}, {Rev: 6, Key: "b"}, {Rev: 6, Key: "c"}, {Rev: 9, Key: "a"}}
	for _, tc := range []struct {
		name                   string
		live                   []Event
		gaps, order, dup, phan int
	}{
		{"all, in order", history, 0, 0, 0, 0},
		{"one missed", []Event{history[0], history[1], history[3]}, 1, 0, 0, 0},
		{"out of order", []Event{history[0], history[3], history[1], history[2]}, 0, 2, 0, 0},
		{"twice", []Event{history[0], history[1], history[2], history[2], history[3]}, 0, 0, 1, 0},
		{"invented", append([]Event{{Rev: 7, Key: "z"}}, history...), 0, 3, 0, 1},
	} {
		g, o, d, p := compareWatch(tc.live, history)
		if g != tc.gaps || o != tc.order || d != tc.dup || p != tc.phan {
			t.Errorf("%s: gaps %d, out of order %d, duplicates %d, phantoms %d; want %d %d %d %d", tc.name, g, o, d, p, tc.gaps, tc.order, tc.dup, tc.phan)
		}
	}
	acked := []Write{{Key: "a", Value: "x", Rev: 5}, {Key: "b", Value: "y", Rev: 7}}
	if n := lost(acked, []Event{{Rev: 5, Key: "a", Value: "x"}}); n != 1 {
		t.Errorf("lost = %d, want 1 (b at 7 is not in the history)", n)
	}
}
