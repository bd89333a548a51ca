package cluster

import (
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

func (h *harness) extend(c *Session, owner uint64, key string, token uint64, lease uint16) {
	h.n.Extend(c, owner, []byte(key), token, lease)
}

// A single-mode holder that extends keeps its key past the first lease, until the extended one
// ends; the sweep then frees it for the next waiter.
func TestExtendKeepsTheKeyUntilTheNewLeaseEnds(t *testing.T) {
	h := newHarness(t, nil)
	if h.n.Revisions() != wire.FlagLeases {
		t.Fatalf("a single-mode node serves revisions %#x, want FlagLeases", h.n.Revisions())
	}
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 10)
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	b, rb := h.conn()
	h.acquire(b, 2, "k", 60, 30)
	h.clock.Advance(8 * time.Second)
	h.extend(a, 3, "k", tok, 10)
	want(t, ra.one(t), wire.OpExtend, 3)
	h.clock.Advance(9 * time.Second) // 17 s: past the first lease, inside the extended one
	h.n.Sweep()
	rb.none(t)
	h.clock.Advance(time.Second) // 18 s: the extended lease ends
	h.n.Sweep()
	got := want(t, rb.one(t), wire.OpAcquire, 2)
	if got.Token <= tok {
		t.Fatalf("next token %d, want above %d", got.Token, tok)
	}
	if got.Age != 18000 {
		t.Fatalf("waiter's grant age %d ms, want 18000 (read at 0, granted at 18 s)", got.Age)
	}
	h.extend(a, 4, "k", tok, 10) // the old token's lease is over: nothing to extend
	want(t, ra.one(t), wire.OpNotHeld, 4)
}

// An extend replaces the end of the lease: a shorter one shortens the lock.
func TestExtendShorterLeaseShortensTheLock(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 60)
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	h.extend(a, 2, "k", tok, 1)
	want(t, ra.one(t), wire.OpExtend, 2)
	h.clock.Advance(time.Second)
	if n := h.n.Sweep(); n != 1 {
		t.Fatalf("sweep freed %d, want the shortened lease", n)
	}
	if s := h.n.Stats(); s.Keys != 0 {
		t.Fatalf("stats %+v, want the key free", s)
	}
}

// A lease that ended is never revived, even before the sweep has freed it; a token that never
// held the key, a free key, and token 0 extend nothing.
func TestExtendRefusals(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 5)
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	h.extend(a, 2, "k", tok+1, 30)
	want(t, ra.one(t), wire.OpNotHeld, 2)
	h.extend(a, 3, "k", 0, 30)
	want(t, ra.one(t), wire.OpNotHeld, 3)
	h.extend(a, 4, "free", tok, 30)
	want(t, ra.one(t), wire.OpNotHeld, 4)
	h.clock.Advance(5 * time.Second) // the lease ends; no sweep has run
	h.extend(a, 5, "k", tok, 30)
	want(t, ra.one(t), wire.OpNotHeld, 5)
	if s := h.n.Stats(); s.Keys != 0 {
		t.Fatalf("stats %+v: the ended lease was freed lazily by the extend", s)
	}
	// The key is free for the next acquire, with a new token.
	h.acquire(a, 6, "k", 0, 5)
	if got := want(t, ra.one(t), wire.OpAcquire, 6); got.Token <= tok {
		t.Fatalf("token %d after the refused extend, want above %d", got.Token, tok)
	}
}

// An immediate grant's age is 0 on the node's clock; a waiter's is its time in the queue.
func TestGrantAge(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	first := want(t, ra.one(t), wire.OpAcquire, 1)
	if first.Age != 0 {
		t.Fatalf("immediate grant age %d, want 0", first.Age)
	}
	b, rb := h.conn()
	h.acquire(b, 2, "k", 60, 30)
	h.clock.Advance(2345 * time.Millisecond)
	h.n.Release(a, 3, []byte("k"), first.Token)
	want(t, ra.one(t), wire.OpRelease, 3)
	if got := want(t, rb.one(t), wire.OpAcquire, 2); got.Age != 2345 {
		t.Fatalf("waiter's age %d ms, want 2345", got.Age)
	}
}

// A cluster node whose log has not switched revision 2 on serves none and answers an extend
// E unsupported: definite, and not unavailable, which a client would retry elsewhere.
func TestReplicatedExtendUnsupportedUntilTheSwitch(t *testing.T) {
	h, _, a, ra, tok := leadingWithHolder(t, 30)
	if r := h.n.Revisions(); r != 0 {
		t.Fatalf("revisions %#x before the switch, want 0", r)
	}
	h.extend(a, 2, "k", tok, 30)
	got := want(t, ra.one(t), wire.OpError, 2)
	if got.Reason != wire.ReasonUnsupported {
		t.Fatalf("extend before the switch: E %s, want unsupported", got.Reason)
	}
}
