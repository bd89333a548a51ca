package expiry

import "time"

// SweepInterval is the single-mode sweep period, a compile-time constant
// (PROTOCOL.md section 6): a lease may be freed up to this much after its
// end, never before.
const SweepInterval = 5 * time.Second

// SweepChunk is the number of items a sweep should pop per PopDue call, with
// the caller's lock released between calls. BenchmarkPopDueChunk measures
// one chunk from a 1,000,000-item heap; it is far below the 50 ms that a
// sweep may stall request handling, leaving room for the caller's own work
// per item (a table lookup and a delete).
const SweepChunk = 1024

// PopDue pops at most max items whose Deadline is at or before now, in heap
// order, calling fn with each one after it has left the heap, and reports
// how many it popped and whether due items remain. A caller sweeps in chunks:
//
//	for more := true; more; {
//		mu.Lock()
//		_, more = expiry.PopDue(h, now, expiry.SweepChunk, expire)
//		mu.Unlock()
//	}
//
// Items due after now are never popped. max <= 0 pops nothing and only
// reports whether an item is due. fn may push items onto h (a pushed item
// that is already due may be popped by the same call, within max) or remove
// them. A nil fn just drops the items.
func PopDue(h *Heap, now int64, max int, fn func(*Item)) (n int, more bool) {
	for n < max {
		it := h.Peek()
		if it == nil || it.Deadline > now {
			return n, false
		}
		h.Pop()
		n++
		if fn != nil {
			fn(it)
		}
	}
	it := h.Peek()
	return n, it != nil && it.Deadline <= now
}
