package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
)

// Integrity is our record of what was uploaded, checked by Verify.
type Integrity struct {
	Format         int    `json:"format"`
	GzipSHA256     string `json:"gzipSHA256"`
	GzipSize       int64  `json:"gzipSize"`
	SnapshotSHA256 string `json:"snapshotSHA256"`
	SnapshotSize   int64  `json:"snapshotSize"`
	// SnapshotHashOK: the sha256 etcd appends to every snapshot matched
	// the snapshot's content while it streamed.
	SnapshotHashOK bool `json:"snapshotHashOK"`
	// MinRevision is the cluster revision read just before the snapshot
	// started: the snapshot holds at least this revision. (etcd's snapshot
	// stream carries no revision; 'etcdadm backup verify' reads the exact
	// one from the snapshot.)
	MinRevision     int64   `json:"minRevision"`
	EtcdVersion     string  `json:"etcdVersion"`
	Member          string  `json:"member,omitempty"`
	DurationSeconds float64 `json:"durationSeconds"`
	// WithoutQuorum: the snapshot is Member's data alone, taken while the
	// cluster had no leader ('etcdadm backup now' on a survivor): it may
	// lack the last writes the cluster acknowledged.
	WithoutQuorum bool `json:"withoutQuorum,omitempty"`
}

func parseIntegrity(b []byte) (Integrity, error) {
	var in Integrity
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&in); err != nil {
		return Integrity{}, fmt.Errorf("integrity record: %w", err)
	}
	if in.GzipSHA256 == "" || in.GzipSize <= 0 {
		return Integrity{}, fmt.Errorf("integrity record: no gzip checksum or size")
	}
	return in, nil
}

// snapshotCheck hashes a snapshot stream as it passes and checks the
// sha256 that etcd appends to it, holding back only the last 32 bytes.
type snapshotCheck struct {
	h    hash.Hash // all but the trailing 32 bytes: the database image
	tail []byte
	n    int64
}

func newSnapshotCheck() *snapshotCheck {
	return &snapshotCheck{h: sha256.New(), tail: make([]byte, 0, 2*sha256.Size)}
}

func (c *snapshotCheck) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if len(p) >= sha256.Size {
		c.h.Write(c.tail)
		c.h.Write(p[:len(p)-sha256.Size])
		c.tail = append(c.tail[:0], p[len(p)-sha256.Size:]...)
		return len(p), nil
	}
	c.tail = append(c.tail, p...)
	if extra := len(c.tail) - sha256.Size; extra > 0 {
		c.h.Write(c.tail[:extra])
		c.tail = append(c.tail[:0], c.tail[extra:]...)
	}
	return len(p), nil
}

// hasEmbeddedHash mirrors etcdutl: a snapshot from the API is a whole
// number of 512-byte units plus the 32-byte sha256.
func (c *snapshotCheck) hasEmbeddedHash() bool { return c.n%512 == sha256.Size }

// ok reports whether the embedded hash matches the content.
func (c *snapshotCheck) ok() bool {
	return c.hasEmbeddedHash() && len(c.tail) == sha256.Size && bytes.Equal(c.h.Sum(nil), c.tail)
}

// sum is the sha256 of the database image: the hash etcd appends, once
// ok() has checked it. One pass serves both, saving a second hash over the
// whole snapshot (7 % of the uploader's CPU, docs/benchmarks.md).
func (c *snapshotCheck) sum() string { return fmt.Sprintf("%x", c.h.Sum(nil)) }
