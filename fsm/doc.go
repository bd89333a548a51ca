// Package fsm holds latch's deterministic lock table: which key is held by
// which token, and the one global fencing-token counter (PROTOCOL.md sections
// 1, 4 and 7).
//
// # What it owns
//
// A [Table] maps each held key to its [Holder] (token and lease as granted)
// and remembers the last token issued. Tokens start at floor+1, strictly
// increase across all grants of all keys, are never 0, and never pass
// [MaxToken]: once MaxToken has been issued every acquire fails with
// [ErrTokenExhausted], forever. Nothing wraps, and a failed operation changes
// nothing.
//
// # What it must never do
//
// The table is a pure function of the operations applied to it, in order, so
// that every replica that applies the same Raft log reaches the same state,
// and single mode behaves exactly like a one-node cluster. Therefore it never
// reads a clock or a random source, starts no goroutine, does no I/O and
// keeps no timers: lease deadlines are not its business. It stores the lease
// length only so that whoever drives expiry (package expiry, through the
// node) can rebuild deadlines with [Table.Range]. It does not validate keys,
// owners or lease ranges either; that happens at the edge (package wire)
// before anything reaches the table. It imports neither wire nor expiry: the
// log format is not the wire format.
//
// # Who calls it, from which goroutine
//
// A Table is not safe for concurrent use; exactly one goroutine uses it at a
// time and the caller provides that serialisation:
//
//   - single mode: the node (package cluster, its Local applier) calls it
//     while holding the node's mutex, from session goroutines and from the
//     expiry sweep alike;
//   - cluster mode: hashicorp/raft's FSM goroutine calls it from Apply and
//     Restore; readers on other goroutines (status, metrics) must go through
//     the same lock the FSM adapter takes, never touch the table directly.
//
// # Memory
//
// The service must hold 1,000,000 keys in at most 250 bytes of heap per key
// in total, so the table is a single map[string]Holder: a [Holder] is 16
// bytes with no pointers, the key string is allocated once per grant and may
// be shared with the expiry heap (Acquire returns it). BenchmarkTableMemory
// reports the cost per key. Go maps do not shrink: after a peak the table
// keeps its bucket memory until the process restarts (or the FSM restores a
// snapshot into a new Table).
package fsm
