package backup

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/pgzip"

	"github.com/etcdadm/etcdadm-immutable/internal/etcdmanager"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// Report is what Verify found.
type Report struct {
	Backup Backup
	// CheckedIntegrity: the gzip's sha256 and size matched our record
	// (false for etcd-manager backups, which have none).
	CheckedIntegrity bool
	GzipSize         int64
	SnapshotSize     int64
	// SnapshotPath is the decompressed, checked snapshot, when Verify was
	// asked to keep it (for a restore).
	SnapshotPath string
}

// Verify downloads a backup and checks it end to end: the gzip against the
// integrity record (sha256 and size), the gzip stream itself, and the
// sha256 etcd embeds in every snapshot. With keepDir set, the decompressed
// snapshot is left in that directory for a restore; otherwise nothing is
// written to disk. Any mismatch is ErrCorrupt.
func Verify(ctx context.Context, st store.Store, name, keepDir string) (Report, error) {
	b, err := Get(ctx, st, name)
	if err != nil {
		return Report{}, err
	}
	name = b.Name
	rc, info, err := st.Get(ctx, name+"/"+etcdmanager.DataFile)
	if errors.Is(err, store.ErrNotFound) {
		return Report{}, fmt.Errorf("backup %s: %w: %s is missing", name, ErrCorrupt, etcdmanager.DataFile)
	}
	if err != nil {
		return Report{}, fmt.Errorf("backup %s: %w", name, err)
	}
	defer rc.Close()
	rep := Report{Backup: b}

	gzHash := sha256.New()
	var gzSize countWriter
	zr, err := pgzip.NewReader(io.TeeReader(rc, io.MultiWriter(gzHash, &gzSize)))
	if err != nil {
		return rep, fmt.Errorf("backup %s: %w: not gzip: %w", name, ErrCorrupt, err)
	}
	defer zr.Close()
	check := newSnapshotCheck()
	sink := io.Writer(check)
	var out *os.File
	if keepDir != "" {
		out, err = os.OpenFile(filepath.Join(keepDir, name+".db"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return rep, fmt.Errorf("backup %s: %w", name, err)
		}
		defer out.Close()
		sink = io.MultiWriter(check, out)
	}
	if _, err := io.Copy(sink, zr); err != nil {
		return rep, fmt.Errorf("backup %s: %w: %w", name, ErrCorrupt, err)
	}
	// Drain so the hash covers every stored byte, even after the gzip end.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return rep, fmt.Errorf("backup %s: download: %w", name, err)
	}
	rep.GzipSize, rep.SnapshotSize = int64(gzSize), check.n
	if info.Size >= 0 && info.Size != int64(gzSize) {
		return rep, fmt.Errorf("backup %s: %w: read %d bytes of %d", name, ErrCorrupt, gzSize, info.Size)
	}
	if in := b.Integrity; in != nil {
		if in.GzipSize != int64(gzSize) || in.GzipSHA256 != fmt.Sprintf("%x", gzHash.Sum(nil)) {
			return rep, fmt.Errorf("backup %s: %w: %s does not match its integrity record (sha256/size)", name, ErrCorrupt, etcdmanager.DataFile)
		}
		if in.SnapshotSize != check.n || in.SnapshotSHA256 != check.sum() {
			return rep, fmt.Errorf("backup %s: %w: snapshot does not match its integrity record", name, ErrCorrupt)
		}
		rep.CheckedIntegrity = true
	}
	if !check.ok() {
		return rep, fmt.Errorf("backup %s: %w: the snapshot's embedded sha256 does not match its content", name, ErrCorrupt)
	}
	if out != nil {
		if err := out.Sync(); err != nil {
			return rep, err
		}
		rep.SnapshotPath = out.Name()
	}
	return rep, nil
}
