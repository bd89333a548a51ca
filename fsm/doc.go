// Package fsm holds latch's deterministic lock table: which key is held by
// which token, and the one global fencing-token counter (docs/protocol.md sections
// 1, 4 and 7); the replicated command set and its log codec; the snapshot
// codec; and the hashicorp/raft FSM adapter that replicates the table in
// cluster mode.
//
// # What it owns
//
// A [Table] maps each held key to its [Holder] (token, current lease, and
// how many times that lease was extended), remembers the last token
// issued, and holds the cluster-wide feature bits ([Features]) turned on so
// far. Tokens start at floor+1, strictly increase across all grants of
// all keys, are never 0, and never pass [MaxToken]: once MaxToken has been
// issued every acquire fails with [ErrTokenExhausted], forever. Nothing
// wraps, and a failed operation changes nothing.
//
// Every change is a [Command] (acquire, release, expire, floor, extend,
// enable) applied by [Table.ApplyCommand], the one transition both modes
// share, which answers with a [Result]. An extend gives a live holder a new
// lease and keeps its token; it counts the extension, and an expire frees a
// key only for the count it was made for, so an expiry proposed for a
// lease's old end cannot free the extended lock. An enable is the
// cluster-wide feature switch, one-way like etcd's cluster version: the
// leader commits it once every member reports support (FeatureLeases:
// protocol revision 2), every replica reads it with [FSM.Features], and a
// server offers the revision only once it is on. In cluster mode a raft log entry
// carries a batch of commands ([AppendBatch], [DecodeBatch]): many client
// operations share one disk sync, and the leader can release (or expire) a
// key and grant it to its next waiter in one entry. [FSM] applies committed
// entries to a Table and implements raft.FSM and raft.BatchingFSM;
// [WriteSnapshot] and [ReadSnapshot] are its snapshot format, usable
// without raft.
//
// # What it must never do
//
// The table is a pure function of the commands applied to it, in order, so
// that every replica that applies the same Raft log reaches the same state,
// replays decide as the first run did, and single mode behaves exactly like
// a one-node cluster. Therefore it never reads a clock or a random source,
// starts no goroutine, does no I/O of its own and keeps no timers: lease
// deadlines are not its business. Time enters only as values inside
// commands: a lease length, and an expiry, which the leader decides with
// its own clock and proposes as an Expire command that frees the key only
// if its token still holds, not extended since. The table stores the lease
// length (the current one: an Extend replaces it) only so that whoever
// drives expiry (package expiry, through the node) can rebuild deadlines
// with [Table.Range], for example a new leader after its Barrier, through
// [FSM.Read].
//
// The log must be robust to any bytes, so ApplyCommand checks the ranges
// of docs/protocol.md section 4 again (key 1..[MaxKeyLen] bytes, lease
// 1..[MaxLease] seconds, floor at most MaxToken) and answers Invalid
// otherwise; key contents (UTF-8, whitespace) are checked at the edge by
// package wire only. These rules and every transition are part of the log
// format ([BatchVersion]): changing any of them needs a new version.
//
// The log has two batch versions (command.go): 1, which every latch reads,
// and 2, which adds extend and enable. A batch is written in version 1
// whenever version 1 carries it, so a cluster that never extends writes the
// bytes it always wrote. An entry this latch cannot decode, of a newer
// version (a leader already upgraded), enabling a feature bit it does not
// know, or malformed, is never skipped: skipping an entry another replica
// applies diverges. The FSM halts instead ([FSM.Err]) until the node runs a
// latch that reads it and replays it.
//
// The --token-floor of a cluster enters through the log as a Floor command
// at bootstrap, never as a local setting: a node that joins later replays
// the log or restores a snapshot and must decide as the others did, so
// every FSM starts from the same floor (0). The package imports neither
// wire nor expiry: the log format is not the wire format.
//
// # Who calls it, from which goroutine
//
// A Table is not safe for concurrent use; exactly one goroutine uses it at a
// time and the caller provides that serialisation:
//
//   - single mode: the node (package cluster, its Local applier) calls it
//     while holding the node's mutex, from session goroutines and from the
//     expiry sweep alike;
//   - cluster mode: hashicorp/raft's FSM goroutine calls the [FSM] (Apply,
//     ApplyBatch, Snapshot, Restore), which calls the table under its own
//     lock; raft's snapshot goroutine persists a copy taken by Snapshot;
//     readers on other goroutines (expiry rebuild, status, metrics,
//     readiness) go through FSM.Read, Holder, LastToken, Len and
//     AppliedIndex, never touch the table directly, and never change it.
//
// # Snapshots
//
// A snapshot is the whole state: the last token, the feature bits and every
// holder (its current lease and extension count), keys in sorted order so
// that the bytes depend on the state alone, behind a magic, a version and a
// CRC-32C. Like a batch, it is written in the oldest version that carries
// it: 1 while no holder is extended and no feature is on, 2 while a holder
// is extended and no feature is on, 3 once a feature is on (snapshot.go);
// every version restores, an older one with features 0. Restore reads and verifies a snapshot into a new
// table and swaps it in only on success: it replaces, never merges, and a
// corrupt snapshot leaves the current state untouched. FSM.Snapshot only
// copies the entries (about 20 ms for 1,000,000 keys); sorting and writing
// happen in Persist, concurrently with later applies.
//
// # Memory
//
// The service must hold 1,000,000 keys in at most 250 bytes of heap per key
// in total, so the table is a single map[string]Holder: a [Holder] is 16
// bytes with no pointers (the extension count sits in what was padding),
// the key string is allocated once per grant and may be shared with the
// expiry heap (Acquire returns it, and so does a Granted Result). An
// extend stores the key anew, as every map write does, and returns that
// string too (an Extended Result). BenchmarkTableMemory reports the cost
// per key. A snapshot copy costs 32 more bytes per key while it lives. Go
// maps do not shrink: after a peak the table keeps its bucket memory until
// the process restarts (or the FSM restores a snapshot into a new Table).
package fsm
