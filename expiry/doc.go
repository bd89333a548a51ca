// Package expiry holds lease deadlines: a min-heap of token-carrying items
// ordered by deadline, and PopDue, the pure step of every expiry sweep
// (PROTOCOL.md sections 6 and 7).
//
// # What it owns
//
// A [Heap] of [*Item], each a (deadline, token, key) triple. An item does not
// free anything by itself: when it comes due, the caller asks the lock table
// to free the key only if the item's token still holds it (fsm.Table.Expire
// in single mode, an "expire key token" log entry in cluster mode). A stale
// item, whose key was released or granted again, is dropped and never acted
// on. Items can also be removed in O(log n) when a lock is released, so the
// heap holds no garbage, and re-timed with [Heap.Fix] when a new leader
// restarts every lease in full.
//
// # What it must never do
//
// It is a pure data structure: no goroutines, no timers, no clock, no
// randomness, no I/O, no logging. Deadlines are int64 values on the caller's
// clock (for example nanoseconds of a monotonic clock); only their order
// matters here. It imports no server code (not fsm, not wire) and carries
// tokens as plain uint64.
//
// # Who calls it, from which goroutine
//
// A Heap is not safe for concurrent use; its owner serialises access:
//
//   - single mode: the node (package cluster) pushes and removes items while
//     holding its mutex, and its sweep goroutine wakes every [SweepInterval],
//     takes the same mutex and calls [PopDue] with at most [SweepChunk] items,
//     releasing the mutex between chunks while more are due, so one sweep
//     never stalls request handling for long;
//   - cluster mode: the same, on the leader only, with the leader's expiry
//     driver in place of the sweep; [Heap.Reset] empties the heap when the
//     node stops leading.
//
// # Why a hand-written heap
//
// container/heap would work without allocating (*Item fits an interface
// word), but every comparison and swap goes through interface method calls,
// and keeping each item's index right would be split between this package and
// heap.Interface methods. The hand-written sift-up/sift-down is short, keeps
// the index bookkeeping in one place that the invariant checker in the tests
// covers, and is cheaper per pop, which is what bounds a sweep chunk.
//
// # Memory
//
// An Item is 48 bytes of heap plus one 8-byte slot in the heap's slice; the
// key string is shared with the lock table, not copied. The slice shrinks
// when the heap falls below a quarter of its capacity. BenchmarkHeapMemory
// reports the cost per item.
package expiry
