package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"testing"
)

// TestObjectsRealistic checks what the benchmark's numbers rest on: every
// object is valid JSON of 1-8 KiB under a unique key, and gzip shrinks the
// stream 3-6x, as it does a real cluster's data.
func TestObjectsRealistic(t *testing.T) {
	g := newObjectGen(1)
	var all bytes.Buffer
	seen := map[string]bool{}
	kinds := map[string]int{}
	for all.Len() < 16<<20 {
		k, v := g.next()
		if seen[k] {
			t.Fatalf("key %s made twice", k)
		}
		seen[k] = true
		if len(v) < minObject || len(v) > maxObject {
			t.Fatalf("%s: %d bytes, want %d-%d", k, len(v), minObject, maxObject)
		}
		var obj struct{ Kind string }
		if err := json.Unmarshal(v, &obj); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", k, err, v)
		}
		kinds[obj.Kind]++
		all.Write(v)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(all.Bytes())
	zw.Close()
	ratio := float64(all.Len()) / float64(gz.Len())
	t.Logf("%d objects, %.0f bytes average, gzip ratio %.2f, kinds %v", len(seen), float64(all.Len())/float64(len(seen)), ratio, kinds)
	if ratio < 3 || ratio > 6 {
		t.Errorf("gzip ratio %.2f, want 3-6", ratio)
	}
}
