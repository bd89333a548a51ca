package behaviour

import (
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Section 7: a lease is never shorter than asked; once over, the key is freed (in single mode
// lazily at the next acquire, in cluster mode by an expiry through the log, so a little
// later), a waiter is granted it with a larger token, and the old token is N.
func leaseExpires(t *testing.T, s *suite) {
	short := s.key("short")
	c := s.dial(t)
	sent := time.Now() // the lease runs from the grant, which is later
	old := c.Grant(t, 1, 0, 1, short)
	c.Send(t, wiretest.Acquire(2, 0, 1, short))
	if r := c.Next(t); r.Op == wire.OpAcquire {
		if d := time.Since(sent); d < time.Second {
			t.Fatalf("key granted again %v after a 1 s lease", d)
		}
	} else if r != resp(wire.OpTimeout, 2) {
		t.Fatalf("got %s, want T", wiretest.Describe(r))
	}
	tok := c.Grant(t, 3, 30, 30, short)
	if d := time.Since(sent); d < time.Second {
		t.Fatalf("key granted again %v after a 1 s lease", d)
	}
	if tok <= old {
		t.Fatalf("token %d not above %d", tok, old)
	}
	c.Send(t, wiretest.Release(4, old, short))
	c.Expect(t, resp(wire.OpNotHeld, 4))
	release(t, c, 5, tok, short)
}

// Section 7: the lease runs from the grant. A waiter granted late holds the key for its whole
// lease from then, not from when its frame was read.
func leaseRunsFromGrant(t *testing.T, s *suite) {
	k := s.key("k")
	h, w, probe := s.dial(t), s.dial(t), s.dial(t)
	tok := h.Grant(t, 1, 0, 60, k)
	w.Send(t, wiretest.Acquire(2, 30, 2, k)) // lease 2 s
	s.waitWaiters(t, 1)
	time.Sleep(1500 * time.Millisecond)
	released := time.Now() // the waiter's grant, and its lease, start after this
	release(t, h, 3, tok, k)
	w.ExpectGrant(t, 2)
	time.Sleep(time.Until(released.Add(time.Second)))
	// Counted from the read, the lease would be over by now (read + 2 s < release + 1 s).
	probe.Send(t, wiretest.Acquire(4, 0, 30, k))
	r := probe.Next(t)
	switch {
	case r == resp(wire.OpTimeout, 4):
	case r.Op == wire.OpAcquire && r.Owner == 4:
		if d := time.Since(released); d < 2*time.Second {
			t.Fatalf("key granted again %v after the waiter's 2 s lease began", d)
		}
	default:
		t.Fatalf("got %s, want T", wiretest.Describe(r))
	}
}

// An expired lease seen by a release: the release is N, and the key's waiter is granted.
func expiredLeaseSeenByRelease(t *testing.T, s *suite) {
	k := s.key("k")
	h, w := s.dial(t), s.dial(t)
	sent := time.Now()
	tok := h.Grant(t, 1, 0, 1, k)
	answered := time.Now()
	w.Send(t, wiretest.Acquire(2, 30, 30, k))
	s.waitWaiters(t, 1)
	time.Sleep(time.Until(answered.Add(1100 * time.Millisecond)))
	h.Send(t, wiretest.Release(3, tok, k))
	h.Expect(t, resp(wire.OpNotHeld, 3))
	if next := w.ExpectGrant(t, 2); next <= tok {
		t.Fatalf("waiter token %d not above %d", next, tok)
	}
	if d := time.Since(sent); d < time.Second {
		t.Fatalf("waiter granted %v after a 1 s lease began", d)
	}
}
