package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdadm/etcdadm-immutable/internal/atomicfile"
	"github.com/etcdadm/etcdadm-immutable/internal/member"
	"github.com/etcdadm/etcdadm-immutable/internal/store"
)

// RecoverKey holds the request to rebuild a cluster that lost its
// majority from one surviving member.
const RecoverKey = "etcdadm/recover.json"

// recoverMarker in a data directory names the recovery it was handled for.
const recoverMarker = ".etcdadm-recovered"

// ErrQuorumHolds: recovery from one member is refused while a majority
// answers (it would throw away a working cluster).
var ErrQuorumHolds = errors.New("a majority of the members still answers")

// Recover is the request.
type Recover struct {
	ID     string    `json:"id"`
	Member string    `json:"member"`
	At     time.Time `json:"at"`
	State  State     `json:"state"`
}

// RequestRecover records that the cluster is to be rebuilt from member
// name: q must show the majority lost and name answering.
func RequestRecover(ctx context.Context, st store.Store, q Quorum, name string, now time.Time) (Recover, error) {
	if err := checkRequest(ctx, st, kindRecover); err != nil {
		return Recover{}, err
	}
	if !q.Lost {
		return Recover{}, fmt.Errorf("%w (%d of %d, %d needed): nothing to recover; replace or restart the members that are down", ErrQuorumHolds, q.Answering, len(q.Members), q.Need)
	}
	found := false
	for _, m := range q.Members {
		if m.Name == name {
			if !m.Answering {
				return Recover{}, fmt.Errorf("recover: %s does not answer; its etcd must run (alone) to recover from it: start it, or pick one that answers (%s has the most of the log)", name, q.Best)
			}
			found = true
		}
	}
	if !found {
		names := make([]string, 0, len(q.Members))
		for _, m := range q.Members {
			names = append(names, m.Name)
		}
		return Recover{}, fmt.Errorf("recover: %s is not a voting member; the members are %s (%s has the most of the log)", name, strings.Join(names, ", "), q.Best)
	}
	if r, err := LoadRecover(ctx, st); err != nil {
		return Recover{}, err
	} else if r != nil && r.State == Running {
		return Recover{}, fmt.Errorf("recover: a recovery from %s is already in progress (%s)", r.Member, r.ID)
	}
	r := Recover{ID: now.UTC().Format("20060102T150405Z"), Member: name, At: now.UTC(), State: Running}
	b, err := json.Marshal(r)
	if err != nil {
		return r, err
	}
	if _, err := store.PutBytes(ctx, st, RecoverKey, b, store.PutOptions{}); err != nil {
		return r, fmt.Errorf("recover: %w", err)
	}
	return r, nil
}

// LoadRecover reads the recovery request; nil when there is none.
func LoadRecover(ctx context.Context, st store.Store) (*Recover, error) {
	b, _, err := store.GetBytes(ctx, st, RecoverKey, 1<<16)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	var r Recover
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("recover: %s: %w", RecoverKey, err)
	}
	return &r, nil
}

// ActRecover is a host's part of a recovery. The named member's host
// keeps a copy of its data, restarts it alone with etcd's
// --force-new-cluster, then normally: a one-member cluster with all it
// had (acted is true). Every other host moves its stale data aside
// (acted false): member join then adds it back as a new member, one
// learner at a time.
func ActRecover(ctx context.Context, cfg member.Config, d member.Deps) (acted bool, err error) {
	r, err := LoadRecover(ctx, d.Store)
	if err != nil || r == nil || r.State != Running {
		return false, err
	}
	log := d.Log.With("component", "recover")
	dataDir := member.DataDir(cfg)
	marker := filepath.Join(dataDir, recoverMarker)
	if b, _ := os.ReadFile(marker); string(b) == r.ID {
		return false, nil
	}
	src := filepath.Join(dataDir, "member")
	aside := filepath.Join(dataDir, "member.before-recover-"+r.ID)
	if err := d.Service.Stop(ctx); err != nil {
		return false, fmt.Errorf("recover: stop etcd: %w", err)
	}
	if cfg.Name != r.Member {
		dst, err := member.MoveAside(dataDir, "before-recover-"+r.ID)
		if err != nil {
			return false, fmt.Errorf("recover: %w", err)
		}
		if dst != "" {
			log.Warn("the cluster is rebuilt from "+r.Member+": this member's stale data is moved aside (kept); member join adds it back as a new member", "to", dst)
		}
		return false, writeMarker(marker, r.ID, cfg)
	}
	if _, err := os.Stat(aside); errors.Is(err, os.ErrNotExist) {
		if err := copyTree(src, aside+".partial"); err != nil {
			return false, fmt.Errorf("recover: keep a copy of %s: %w", src, err)
		}
		if err := os.Rename(aside+".partial", aside); err != nil {
			return false, fmt.Errorf("recover: %w", err)
		}
	}
	log.Warn("RECOVERING from a lost majority: this member restarts as the only member, keeping its data (a copy is in "+aside+")", "member", cfg.Name)
	if err := member.StartForcedAlone(ctx, cfg, d); err != nil {
		return false, err
	}
	if err := writeMarker(marker, r.ID, cfg); err != nil {
		return true, err
	}
	r.State = Done
	b, err := json.Marshal(r)
	if err != nil {
		return true, err
	}
	if _, err := store.PutBytes(ctx, d.Store, RecoverKey, b, store.PutOptions{}); err != nil {
		return true, fmt.Errorf("recover: %w", err)
	}
	log.Info("recovered: a one-member cluster with all this member had; the other hosts join it through member join")
	return true, nil
}

func writeMarker(path, id string, cfg member.Config) error {
	if err := atomicfile.Write(path, []byte(id), 0o600, cfg.Owner.UID, cfg.Owner.GID); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// copyTree copies a data directory (regular files and directories).
func copyTree(src, dst string) error {
	os.RemoveAll(dst) // a partial copy of ours from an interrupted run
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, src)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, fi.Mode().Perm())
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
