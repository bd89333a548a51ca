package raftnode

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// ErrDataDirBroken: the data directory holds raft state that raft could not start from (an
// unreadable log segment, a log with a gap behind the newest readable snapshot, snapshots
// that all fail their checksum). Errors wrapping it name the file and the way back.
var ErrDataDirBroken = errors.New("raftnode: the data directory cannot be started from")

// wayBack is what an operator can do about a broken data directory, for error messages.
func wayBack(dir string) string {
	return fmt.Sprintf("move %s aside (keep it for a bug report) and start the node again with its usual flags: "+
		"a member of a cluster that still has a quorum rejoins empty and catches up from the leader; "+
		"if no other member holds the data, run `latch recover` on the most up-to-date surviving data directory, "+
		"or restore a backup with `latch snapshot restore`", dir)
}

// broken wraps cause as ErrDataDirBroken for dir, naming what failed and the way back; a
// cause that says the disk failed (diskFailed: EIO, EROFS, a failed fsync) is ErrDiskFailed
// instead, whose way back starts with the disk.
func broken(dir, what string, cause error) error {
	if diskFailed(cause) {
		return fmt.Errorf("%w: %s: %w; the disk under %s fails its reads, writes or syncs: repair or replace it and start "+
			"the node again (every start checks the data directory); if the data went with the disk, %s", ErrDiskFailed, what, cause, dir, wayBack(dir))
	}
	return fmt.Errorf("%w: %s: %w; %s", ErrDataDirBroken, what, cause, wayBack(dir))
}

// snapshotPick is the snapshot raft starts from: the newest one whose file passes its
// checksum (raft's FileSnapshotStore.Open verifies it), as raft's own restore picks it.
type snapshotPick struct {
	meta    *raft.SnapshotMeta // nil: none (then the log must start at index 1)
	rc      io.ReadCloser      // the opened snapshot, for the caller to read and close; nil with meta
	skipped []string           // newer snapshots that failed to open, with why
}

// pickSnapshot opens the newest readable snapshot in st. It fails only when there are
// snapshots and none of them can be opened (raft refuses to start then too).
func pickSnapshot(st *stores) (snapshotPick, error) {
	var p snapshotPick
	dir := st.dir
	metas, err := st.snaps.List()
	if err != nil {
		return p, broken(dir, "list the snapshots in "+filepath.Join(dir, "snapshots"), err)
	}
	for _, m := range metas {
		meta, rc, err := st.snaps.Open(m.ID)
		if err != nil {
			p.skipped = append(p.skipped, fmt.Sprintf("%s: %v", filepath.Join(dir, "snapshots", m.ID), err))
			continue
		}
		p.meta, p.rc = meta, rc
		return p, nil
	}
	if len(metas) > 0 {
		return p, broken(dir, "no snapshot can be read", errors.New(fmt.Sprint(p.skipped)))
	}
	return p, nil
}

// errAmnesia is the cause of a refusal to start from state older than the node promised.
var errAmnesia = errors.New("this node would answer from state older than what it promised its peers")

// startState is what check found: the promise the stores now back, and, when check was
// lenient, what it would have refused.
type startState struct {
	cur    promise
	damage []string
}

// check reads what raft.NewRaft reads at start, the way it reads it, and compares it with
// the promise (promise.go): the newest readable snapshot, then every log entry after it up
// to the last (raft panics on an entry it cannot read). A newer snapshot that fails its
// checksum is logged and passed over, as raft does, provided the log still covers
// everything after the older one. Broken structure is always ErrDataDirBroken; state
// older than the promise is too, unless lenient (latch recover inspects such a directory),
// which lists it in damage instead.
func (st *stores) check(log hclog.Logger, lenient bool) (startState, error) {
	var out startState
	dir := st.dir
	amnesia := func(what string) error {
		if lenient {
			out.damage = append(out.damage, what)
			return nil
		}
		return broken(dir, what, errAmnesia)
	}
	p, err := pickSnapshot(st)
	if err != nil {
		return out, err
	}
	var snapIndex, snapTerm uint64
	if p.meta != nil {
		snapIndex, snapTerm = p.meta.Index, p.meta.Term
		_ = p.rc.Close()
	}
	for _, s := range p.skipped {
		log.Warn("a snapshot fails its checksum; starting from an older one", "snapshot", s,
			"using_index", snapIndex)
	}
	walDir := filepath.Join(dir, "wal")
	first, err := st.wal.FirstIndex()
	if err != nil {
		return out, broken(dir, "read the first index of the raft log in "+walDir, err)
	}
	last, err := st.wal.LastIndex()
	if err != nil {
		return out, broken(dir, "read the last index of the raft log in "+walDir, err)
	}
	if verified := st.scan.last(); verified != last {
		return out, walBroken(dir, fmt.Sprintf("raft-wal serves the log in %s up to index %d, but only entries up to %d pass their checksums", walDir, last, verified))
	}
	if t := st.scan.tail(); t != nil && t.torn != "" {
		log.Info("the raft log's last write was torn by a crash (never acknowledged); dropping it", "segment", t.file, "where", t.torn)
	}
	if last > 0 && snapIndex > 0 {
		if first > snapIndex+1 {
			what := fmt.Sprintf("the raft log in %s starts at index %d, but the newest readable snapshot ends at %d", walDir, first, snapIndex)
			if len(p.skipped) > 0 {
				what += fmt.Sprintf(" (newer snapshots failed their checksum: %v)", p.skipped)
			}
			return out, broken(dir, what, raft.ErrLogNotFound)
		}
		if t, ok := st.scan.term(snapIndex); ok && t != snapTerm {
			return out, walBroken(dir, fmt.Sprintf("the newest snapshot ends at index %d in term %d, but the raft log in %s holds that index in term %d: they are of different histories", snapIndex, snapTerm, walDir, t))
		}
	}
	pr, hasPromise, err := readPromise(dir)
	if err != nil {
		if !lenient {
			return out, broken(dir, err.Error(), errAmnesia)
		}
		out.damage = append(out.damage, err.Error())
	}
	// raft installs a snapshot, then clears the log (removeOldLogs). A crash between the two
	// leaves a log that ends before the snapshot, which raft-wal would refuse every append
	// after. It is cleared as raft would have (at the end, once nothing else is wrong), but
	// only for the snapshot this node promised as its newest state; any other such pair is
	// two histories.
	stale := last > 0 && last < snapIndex
	if stale && (!hasPromise || pr.SnapshotIndex != snapIndex || pr.SnapshotTerm != snapTerm) {
		return out, walBroken(dir, fmt.Sprintf("the newest snapshot (index %d, term %d) is newer than the raft log in %s that claims to continue it (entries %d to %d), and this node never promised that snapshot as its newest state", snapIndex, snapTerm, walDir, first, last))
	}
	if !stale && last > snapIndex {
		var e raft.Log
		for i := snapIndex + 1; i <= last; i++ {
			if err := st.wal.GetLog(i, &e); err != nil {
				return out, broken(dir, fmt.Sprintf("read entry %d of the raft log in %s (entries %d to %d)", i, walDir, first, last), err)
			}
			if e.Type == raft.LogConfiguration { // raft decodes these at start, and panics on one that does not decode
				if _, err := decodeConfiguration(e.Data); err != nil {
					return out, broken(dir, fmt.Sprintf("entry %d of the raft log in %s", i, walDir), err)
				}
			}
		}
	}

	if stale {
		last = 0 // as it will be: the snapshot is the end
	}
	cur, err := st.durable(snapIndex, snapTerm, last)
	if err != nil {
		return out, err
	}
	out.cur = cur
	hasData := last > 0 || snapIndex > 0
	if hasData && cur.Term == 0 {
		if err := amnesia(fmt.Sprintf("%s holds no term beside a raft log or snapshot ending at index %d: the votes it held are lost", filepath.Join(dir, "raft.db"), max(last, snapIndex))); err != nil {
			return out, err
		}
	}
	if hasPromise {
		if err := st.comparePromise(&out, pr, amnesia, snapIndex, last); err != nil {
			return out, err
		}
		if st.lagging {
			log.Warn("promised.json is older than raft.db (an older latch ran on this directory, or a write of the promise failed): the log's end is not checked at this start",
				"promised_term", pr.Term, "term", out.cur.Term)
		}
	}
	if stale && !lenient {
		log.Warn("the raft log ends before the snapshot this node installed (a crash while installing it); clearing the log as raft would have", "snapshot_index", snapIndex, "log_first", first)
		if err := st.wal.DeleteRange(first, snapIndex); err != nil {
			return out, broken(dir, "clear the raft log behind the installed snapshot", err)
		}
	}
	return out, nil
}

// comparePromise refuses (through amnesia) stores that hold less than pr promised.
func (st *stores) comparePromise(out *startState, pr promise, amnesia func(string) error, snapIndex, last uint64) error {
	cur, dir, walDir := out.cur, st.dir, filepath.Join(st.dir, "wal")
	if cur.Term < pr.Term || cur.VoteTerm < pr.VoteTerm || (cur.VoteTerm == pr.VoteTerm && cur.Vote != pr.Vote) {
		if err := amnesia(fmt.Sprintf("%s holds term %d and a vote for %q in term %d, but this node promised term %d and a vote for %q in term %d (%s): it could vote twice",
			filepath.Join(dir, "raft.db"), cur.Term, cur.Vote, cur.VoteTerm, pr.Term, pr.Vote, pr.VoteTerm, promiseFile)); err != nil {
			return err
		}
	}
	if cur.Term > pr.Term {
		// Every term change is written to the promise as it happens, so raft.db ahead of
		// it means the promise lags: an older latch ran on this directory (it keeps no
		// promise, and may have cleared a tail since), or a write of it failed. Its log
		// end is then no promise; the next write makes it one again.
		st.lagging = true
		return nil
	}
	end, promised := max(last, snapIndex), max(pr.LastIndex, pr.SnapshotIndex)
	if t := st.scan.tail(); t != nil && t.missing && promised >= t.info.BaseIndex {
		if err := amnesia(fmt.Sprintf("log segment %s (from index %d) is missing, but this node acknowledged entries up to %d (%s)", t.file, t.info.BaseIndex, promised, promiseFile)); err != nil {
			return err
		}
	} else if end < promised {
		if err := amnesia(fmt.Sprintf("the raft log in %s ends at index %d, but this node acknowledged entries up to %d (%s): acknowledged entries are lost", walDir, end, promised, promiseFile)); err != nil {
			return err
		}
	}
	if pr.LastTerm != 0 && pr.LastIndex > snapIndex {
		if t, ok := st.scan.term(pr.LastIndex); ok && t != pr.LastTerm {
			return amnesia(fmt.Sprintf("the raft log in %s holds entry %d in term %d, but this node acknowledged it in term %d (%s)", walDir, pr.LastIndex, t, pr.LastTerm, promiseFile))
		}
	}
	return nil
}

// durable is what the stores hold now, as a promise.
func (st *stores) durable(snapIndex, snapTerm, last uint64) (promise, error) {
	p := promise{SnapshotIndex: snapIndex, SnapshotTerm: snapTerm, LastIndex: snapIndex, LastTerm: snapTerm}
	var err error
	if p.Term, err = stableUint64(st.bolt, keyCurrentTerm); err != nil {
		return p, broken(st.dir, "read the term in raft.db", err)
	}
	if p.VoteTerm, err = stableUint64(st.bolt, keyLastVoteTerm); err != nil {
		return p, broken(st.dir, "read the vote in raft.db", err)
	}
	vote, err := st.bolt.Get(keyLastVoteCand)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return p, broken(st.dir, "read the vote in raft.db", err)
	}
	p.Vote = string(vote)
	if last > 0 {
		t, ok := st.scan.term(last)
		if !ok {
			return p, walBroken(st.dir, fmt.Sprintf("entry %d of the raft log was not verified", last))
		}
		p.LastIndex, p.LastTerm = last, t
	}
	return p, nil
}

// stableUint64 reads a raft.db number; a missing key is 0.
func stableUint64(s raft.StableStore, key []byte) (uint64, error) {
	v, err := s.GetUint64(key)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return 0, nil
	}
	return v, err
}
