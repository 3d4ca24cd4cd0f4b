// Package snapshotdb reads an etcd v3 backend file (a snapshot or a
// restored member/snap/db) offline and reports what an operator checks
// after a restore: revision, live keys, leases.
package snapshotdb

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Stats of one backend file.
type Stats struct {
	Revision  int64 // newest revision in the key space
	Revisions int64 // stored revisions, including old versions and deletes
	LiveKeys  int64 // keys that exist at Revision
	Leases    int64
}

// Inspect opens path read-only and counts. It holds one entry per live key
// in memory.
func Inspect(path string) (Stats, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return Stats{}, fmt.Errorf("snapshotdb: open %s: %w", path, err)
	}
	defer db.Close()
	var st Stats
	err = db.View(func(tx *bolt.Tx) error {
		kb := tx.Bucket([]byte("key"))
		if kb == nil {
			return fmt.Errorf("no key bucket: not an etcd v3 database")
		}
		live := map[string]bool{}
		err := kb.ForEach(func(k, v []byte) error {
			if len(k) < 17 {
				return fmt.Errorf("malformed revision key %x", k)
			}
			st.Revisions++
			if main := int64(binary.BigEndian.Uint64(k[:8])); main > st.Revision {
				st.Revision = main
			}
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return fmt.Errorf("revision %x: %w", k, err)
			}
			tombstone := len(k) == 18 && k[17] == 't'
			if tombstone {
				delete(live, string(kv.Key))
			} else {
				live[string(kv.Key)] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		st.LiveKeys = int64(len(live))
		if lb := tx.Bucket([]byte("lease")); lb != nil {
			st.Leases = int64(lb.Stats().KeyN)
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("snapshotdb: %s: %w", path, err)
	}
	return st, nil
}
