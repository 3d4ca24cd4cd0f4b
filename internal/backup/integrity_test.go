package backup

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// fakeSnapshot is a database image followed by its sha256, as etcd sends it.
func fakeSnapshot(n int) []byte {
	db := make([]byte, n)
	for i := range db {
		db[i] = byte(rand.IntN(256))
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

func TestSnapshotCheck(t *testing.T) {
	snap := fakeSnapshot(8192)
	for _, chunk := range []int{1, 7, 31, 32, 33, 4096, len(snap)} {
		c := newSnapshotCheck()
		for r := bytes.NewReader(snap); r.Len() > 0; {
			b := make([]byte, min(chunk, r.Len()))
			r.Read(b)
			c.Write(b)
		}
		if !c.ok() {
			t.Errorf("chunk %d: valid snapshot rejected", chunk)
		}
	}
	bad := bytes.Clone(snap)
	bad[100] ^= 1
	c := newSnapshotCheck()
	c.Write(bad)
	if c.ok() {
		t.Error("flipped bit not detected")
	}
	c = newSnapshotCheck()
	c.Write(snap[:len(snap)-512])
	if c.ok() {
		t.Error("truncated snapshot accepted")
	}
}
