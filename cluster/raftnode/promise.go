package raftnode

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// The promise: what this node told its peers, kept where a damaged log cannot take it away.
//
// A Raft node's answers are promises: a vote binds it for the rest of its term, and an
// acknowledged entry may be what made a grant committed. A node that forgets either (raft.db
// emptied, a log segment truncated, lost or overwritten) can vote twice in one term or help
// elect a leader that lacks committed grants: two holders of one lock, or a token that goes
// backwards. raft-wal and raft-boltdb cannot notice on their own: an emptied raft.db reads as
// a new node, and a truncated log as a torn write.
//
// So the node keeps a copy of what it promised in promised.json, beside raft.db and wal/ and
// written apart from both (write to a temporary file, fsync, rename, fsync the directory):
//
//   - term and vote, written whenever raft persists them (an election, a new term: rare), so
//     no vote is ever forgotten;
//   - the last durable log index and its term, written every promiseInterval when it moved,
//     at every snapshot, before the log's tail is cleared (a new leader overwriting
//     entries this node never committed: the promise is lowered first, then the entries go),
//     and at a clean stop. Entries appended since the last write are the window: damage
//     that takes only those (at most promiseInterval of appends) is not detected;
//   - the newest snapshot this node took or installed.
//
// Every start compares the stores with it (verify in check.go) and refuses a data directory
// that holds less than it promised. No append waits for it: raft-wal's fsync per batch stays
// the only sync on the write path.

// promiseFile is the promise's file name in the data directory.
const promiseFile = "promised.json"

// promise is the content of promised.json.
type promise struct {
	Version       int    `json:"version"`
	Term          uint64 `json:"term"`           // raft.db's CurrentTerm
	VoteTerm      uint64 `json:"vote_term"`      // raft.db's LastVoteTerm
	Vote          string `json:"vote"`           // raft.db's LastVoteCand
	LastIndex     uint64 `json:"last_index"`     // the log's last durable entry
	LastTerm      uint64 `json:"last_term"`      // its term (0: not known)
	SnapshotIndex uint64 `json:"snapshot_index"` // the newest snapshot taken or installed
	SnapshotTerm  uint64 `json:"snapshot_term"`
}

const promiseVersion = 1

// promiseEnvelope is the file: the promise and a checksum of its exact bytes, so that a
// damaged promise is refused rather than believed.
type promiseEnvelope struct {
	Promise json.RawMessage `json:"promise"`
	SHA256  string          `json:"sha256"`
}

// readPromise reads dataDir's promise; ok is false when there is none.
func readPromise(dataDir string) (p promise, ok bool, err error) {
	path := filepath.Join(dataDir, promiseFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	var env promiseEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return p, false, fmt.Errorf("%s is damaged: %v", path, err)
	}
	sum := sha256.Sum256(env.Promise)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return p, false, fmt.Errorf("%s is damaged: its checksum does not match", path)
	}
	dec := json.NewDecoder(bytes.NewReader(env.Promise))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, false, fmt.Errorf("%s is damaged: %v", path, err)
	}
	if p.Version != promiseVersion {
		return p, false, fmt.Errorf("%s has version %d; this latch reads version %d", path, p.Version, promiseVersion)
	}
	return p, true, nil
}

// writePromise replaces dataDir's promise durably: a temporary file, fsynced, renamed over
// the old one, and the directory fsynced.
func writePromise(dataDir string, p promise) error {
	p.Version = promiseVersion
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	raw, err := json.Marshal(promiseEnvelope{Promise: body, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return err
	}
	return writeFileDurably(dataDir, promiseFile, append(raw, '\n'))
}

// writeFileDurably replaces the file name in dir with data: a temporary file, fsynced,
// renamed over the old one, and the directory fsynced.
func writeFileDurably(dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("raftnode: write %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftnode: fsync %s: %w", dir, err)
	}
	return nil
}

// keeper holds what the stores hold now (cur, updated by the store wrappers in
// promisestores.go) and writes it as the promise when it changed. mu guards cur and is held
// only to read or change it, so an append never waits for a write of the file; wmu
// serialises the writes, and holds a lowering of the promise together with the deletion it
// must precede.
type keeper struct {
	dir     string
	wmu     sync.Mutex
	mu      sync.Mutex
	cur     promise
	written promise // what the file holds, when fresh (under wmu)
	fresh   bool
}

func newKeeper(dir string, cur promise) *keeper { return &keeper{dir: dir, cur: cur} }

// set changes cur.
func (k *keeper) set(fn func(p *promise)) {
	k.mu.Lock()
	fn(&k.cur)
	k.mu.Unlock()
}

// snapshot returns cur.
func (k *keeper) snapshot() promise {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// flush writes cur if it differs from the file.
func (k *keeper) flush() error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	return k.flushLocked()
}

// flushLocked is flush with wmu held.
func (k *keeper) flushLocked() error {
	cur := k.snapshot()
	if k.fresh && k.written == cur {
		return nil
	}
	if err := writePromise(k.dir, cur); err != nil {
		k.fresh = false
		return err
	}
	k.written, k.fresh = cur, true
	return nil
}

// change applies fn to cur and writes the result before it returns, under wmu (a vote, a
// snapshot, a lowering: rare, and each must be durable before raft goes on).
func (k *keeper) change(fn func(p *promise)) error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	k.set(fn)
	return k.flushLocked()
}
