package fsm

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// FSM adapts a Table to hashicorp/raft: it implements raft.FSM and
// raft.BatchingFSM. Every replica builds one, hands it to raft.NewRaft, and
// from then on the table changes only through committed log entries (each a
// batch, see AppendBatch) and snapshot restores.
//
// # Who calls what, from which goroutine
//
//   - raft's FSM goroutine, one at a time and never concurrently with each
//     other: Apply or ApplyBatch (every committed entry, in log order),
//     Snapshot (must be quick: it only copies the entries), and Restore
//     (at startup, and on a follower that receives InstallSnapshot).
//   - raft's snapshot goroutine: Persist and Release on what Snapshot
//     returned, concurrently with later Applies; they touch only the copy.
//   - any other goroutine (on the leader: the node rebuilding its expiry
//     heap after a Barrier, waiter dispatch, status, metrics, readiness;
//     on every replica: which protocol revision to offer): Read, Holder,
//     LastToken, Features, Len, AppliedIndex, Err. They see the table
//     between two applies, never in the middle of a batch. Nothing outside
//     the FSM goroutine may change the table: every change is a log entry.
//
// An FSM holds no timers and reads no clock: leases are lengths, and
// expiry is an Expire command the leader proposes (docs/protocol.md section 7).
type FSM struct {
	mu    sync.RWMutex
	table *Table // guarded by mu; Restore replaces it whole

	// applied is the index of the last log entry applied, or the index a
	// restored snapshot reflects. It is written under mu (so a Read sees it
	// consistent with the table) and read without it.
	applied atomic.Uint64

	// halted is set, under mu, when an entry that does not decode arrives:
	// from then on nothing is applied until a Restore (see Err).
	halted error

	// cmds is the decode scratch, reused across entries; guarded by mu.
	cmds []Command

	// OnApplied, if set before raft starts, is called on raft's FSM goroutine with every
	// LogCommand entry and the response Apply gave it, in log order, after the table's lock
	// is released (so it may Read). It is how the leader that proposed an entry answers its
	// commands without a goroutine of its own (cluster/raftnode pipeline.go). It must
	// return promptly: raft applies nothing meanwhile. It must not keep l.
	OnApplied func(l *raft.Log, resp any)
}

// Proposal is one command on its way to the log and the callback that receives its result:
// the unit the proposer (cluster/raftnode) takes and the lock node (cluster) hands it.
type Proposal struct {
	Cmd  Command
	Done func(Result, error)
}

var _ raft.BatchingFSM = (*FSM)(nil)

// maxScratch bounds the decode scratch kept between entries, so that one
// huge batch does not pin its size for the life of the process.
const maxScratch = 4096

// NewFSM returns an FSM over an empty table whose first grant is floor+1;
// a floor above MaxToken returns ErrFloorRange.
//
// Every replica must be built with the same floor, because a replica that
// replays the log from the start must decide as the others did. Use 0 and
// put --token-floor into the log as a CmdFloor command at bootstrap, ahead
// of any acquire: a node that joins later gets the floor from the log or
// a snapshot, never from its own flags.
func NewFSM(floor Token) (*FSM, error) {
	t, err := NewTable(floor)
	if err != nil {
		return nil, err
	}
	return &FSM{table: t}, nil
}

// Apply applies one committed log entry (raft.FSM). For a raft.LogCommand
// entry the response, which raft hands to the ApplyFuture on the leader, is
// one of:
//
//   - []Result, one per command of the batch, in order;
//   - an error wrapping ErrHalted, and ErrBatchVersion or
//     ErrBatchMalformed, if the entry does not decode (a format version
//     this latch does not read, an Enable of a feature bit it does not
//     know, or not a well-formed batch of its version),
//     or if the FSM halted on such an entry before (see Err). Nothing in it
//     was applied here; a replica that reads it may apply it.
//
// Any other entry type (raft passes raft.LogConfiguration to a
// BatchingFSM) changes nothing and answers nil. The entry's Data is never
// modified or retained.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	resp := f.applyLocked(l)
	f.mu.Unlock()
	if f.OnApplied != nil && l.Type == raft.LogCommand {
		f.OnApplied(l, resp)
	}
	return resp
}

// ApplyBatch applies several committed log entries under one lock
// (raft.BatchingFSM) and returns one response per entry, as Apply would.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	f.mu.Lock()
	for i, l := range logs {
		resps[i] = f.applyLocked(l)
	}
	f.mu.Unlock()
	if f.OnApplied != nil {
		for i, l := range logs {
			if l.Type == raft.LogCommand {
				f.OnApplied(l, resps[i])
			}
		}
	}
	return resps
}

func (f *FSM) applyLocked(l *raft.Log) any {
	if f.halted != nil {
		return f.halted
	}
	if l.Type != raft.LogCommand {
		f.applied.Store(l.Index)
		return nil
	}
	cmds, err := DecodeBatch(l.Data, f.cmds[:0])
	if err != nil {
		f.halted = fmt.Errorf("%w; log index %d (last applied %d): %w", ErrHalted, l.Index, f.applied.Load(), err)
		return f.halted
	}
	f.applied.Store(l.Index)
	res := make([]Result, len(cmds))
	for i, c := range cmds {
		res[i] = f.table.ApplyCommand(c)
	}
	clear(cmds) // the keys alias l.Data: keep no reference to it
	if cap(cmds) > maxScratch {
		cmds = nil
	}
	f.cmds = cmds[:0]
	return res
}

// ErrHalted is wrapped by Err, and by every response and Snapshot error
// after the FSM halted.
var ErrHalted = errors.New("fsm: halted, applying nothing more: applying the log past an entry this " +
	"latch cannot read would make this replica diverge")

// Err returns nil, or an error wrapping ErrHalted once the FSM has met a
// log entry it cannot decode, and with it the decode error:
//   - ErrBatchVersion: a format version this latch does not read, or an
//     Enable of a feature bit it does not know (a leader running a newer
//     latch, during a rolling upgrade). Upgrade this node.
//   - ErrBatchMalformed: not a well-formed batch of its version. No latch
//     writes one; the log is damaged, or was written by something other
//     than AppendBatch.
//
// There is no entry that fails to decode and is known to be harmless to
// skip: a replica that skips an entry another one applies diverges for
// good (an older latch that skipped an entry of grants would, as leader,
// issue their tokens again), and no node can tell whether the others read
// an entry it cannot. So every such entry halts, even an empty one (no
// latch writes that either).
//
// A halted FSM applies nothing more: every later entry answers the same
// error and AppliedIndex stays at the last entry it did apply, so a halted
// leader grants nothing; Snapshot fails, so that raft cannot compact away
// the entries this node has not applied. After an upgrade and restart the
// node replays them. A successful Restore, which replaces the whole state,
// clears the halt. Readiness and health checks should report Err.
func (f *FSM) Err() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halted
}

// Read calls fn with the table, under a read lock, between two applies.
// Inside fn, AppliedIndex is the index the table reflects. fn must not
// change the table, keep it, or block: it holds up the FSM goroutine, and
// with it every commit. A leader uses it after a Barrier to rebuild its
// expiry heap with Table.Range.
func (f *FSM) Read(fn func(*Table)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.table)
}

// Holder returns key's current holder, if any.
func (f *FSM) Holder(key []byte) (Holder, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Holder(key)
}

// LastToken returns the last token issued (the floor before any grant).
func (f *FSM) LastToken() Token {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.LastToken()
}

// Features returns the cluster-wide feature bits the applied log (or the
// restored snapshot) has turned on: the same on every replica at the same
// applied index. It never loses a bit except through a Restore, which
// replaces the whole state. A node offers what depends on a bit (protocol
// revision 2 for FeatureLeases) only once this has it.
func (f *FSM) Features() Features {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Features()
}

// Len returns the number of held keys.
func (f *FSM) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Len()
}

// AppliedIndex returns the index of the last log entry applied (not the
// entry an FSM halted on, nor any after it), or the index the last restored
// snapshot reflects; 0 before either. raft never
// hands no-op and barrier entries to the FSM, so this can trail raft's own
// AppliedIndex by those: readiness that compares against raft's commit
// index should use (*raft.Raft).AppliedIndex, or wait on a Barrier.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Snapshot copies the table's entries, under the read lock, into an
// immutable snapshot (raft.FSM); the costly work, sorting and writing, is
// in Persist. It costs 32 bytes and one map iteration step per held key.
//
// A halted FSM (see Err) returns its error instead: its state is behind
// raft's applied index.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halted != nil {
		return nil, f.halted
	}
	return &fsmSnapshot{c: f.table.copyState(f.applied.Load())}, nil
}

// Restore replaces the whole state with the snapshot read from rc
// (raft.FSM): it never merges. It reads and verifies the snapshot into a
// new table first (see ReadSnapshot) and swaps it in only if that
// succeeds, so a corrupt snapshot returns an error and leaves the current
// state exactly as it was. It closes rc.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	t, index, err := ReadSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = t
	f.applied.Store(index)
	f.halted = nil
	return nil
}

// fsmSnapshot is what FSM.Snapshot returns: a copy owned by raft's snapshot
// goroutine from then on.
type fsmSnapshot struct {
	c *tableCopy
}

// Persist writes the snapshot to sink in the snapshot format (see
// WriteSnapshot), then closes the sink, or cancels it on any error.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.c.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release drops the copy.
func (s *fsmSnapshot) Release() { s.c = nil }
