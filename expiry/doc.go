// Package expiry holds lease deadlines: a min-heap of every held key's holder (token and
// deadline), found by key and ordered by deadline, and the sweep constants of single mode
// (docs/protocol.md sections 6 and 7).
//
// # What it owns
//
// A [Heap] of [Entry] values, each a (deadline, token, key) triple. An entry does not free
// anything by itself: when it comes due ([Heap.Peek]), the caller asks the lock table to free
// the key only if the entry's token still holds it (an expire command, applied in place in
// single mode, through the log in cluster mode). While that is in flight the entry is parked
// ([Heap.Park]): never due, until it is re-armed with a new deadline ([Heap.Arm]) or removed
// ([Heap.Remove]). A key has at most one entry: [Heap.Set] replaces its holder.
//
// # What it must never do
//
// It is a pure data structure: no goroutines, no timers, no clock, no I/O, no logging.
// Deadlines are int64 values on the caller's clock (for example nanoseconds of a monotonic
// clock); only their order matters here. It imports no server code (not fsm, not wire) and
// carries tokens as plain uint64 below 2^63 ([MaxToken]). Its only randomness is the seed of
// its index hash, which decides nothing but where keys sit in memory.
//
// # Who calls it, from which goroutine
//
// A Heap is not safe for concurrent use; its owner serialises access: the deciding node
// (package cluster: a single-mode server, or the leader) under its mutex. A single-mode sweep
// wakes every [SweepInterval] and expires at most [SweepChunk] due holders per hold of that
// mutex; a new leader builds a fresh Heap from the lock table with every lease in full, and
// sets one timer for its earliest deadline ([Heap.Next]), which it re-sets as that moves.
//
// # Why hand-written
//
// A map of pointers to heap items cost about 110 bytes a key beside the lock table's own map,
// so a leader needed 2.3 times a follower's memory. Here an entry is 32 bytes in a 4-ary heap
// of values, and the index from key to heap position is open addressing in 256 shards (about
// 5 to 8 bytes a key; a shard grows or shrinks alone, so no resize rehashes every key under
// the owner's lock). Check verifies every invariant; the tests drive the heap against a map
// model through random sets, parks, arms and removes.
package expiry
