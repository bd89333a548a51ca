package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Section 6: three gates, each closed at 90% of its hard limit and open again only below 75%.
// With a hard limit of 10 a gate closes when its gauge reaches 9 and opens when it is 7 or
// less. While a gate is closed, release and ping are still answered.

// big is a hard limit the tests never come near.
const big = 1000

// queueWaiters sends n acquires of key with a long wait on c, owners from first on, and waits
// until the node counts want waiters.
func queueWaiters(t *testing.T, ts *testServer, c *wiretest.Conn, key string, first uint64, n, want int) {
	t.Helper()
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = wiretest.Acquire(first+uint64(i), 60, 60, key)
	}
	c.Send(t, frames...)
	ts.waitWaiters(t, want)
}

// handOn releases "k", held with tok, from c (release owner owner) to its first waiter: w's
// acquire of owner next is granted, and the node is down to left waiters. It returns the
// waiter's token.
func handOn(t *testing.T, ts *testServer, c *wiretest.Conn, owner, tok uint64, w *wiretest.Conn, next uint64, left int) uint64 {
	t.Helper()
	c.Send(t, wiretest.Release(owner, tok, "k"))
	c.Expect(t, resp(wire.OpRelease, owner))
	tok = w.ExpectGrant(t, next)
	ts.waitWaiters(t, left)
	return tok
}

// releaseAndPingServed checks that a release and a ping are answered: admission never refuses them.
func releaseAndPingServed(t *testing.T, c *wiretest.Conn, owner uint64) {
	t.Helper()
	c.Send(t, wiretest.Release(owner, 12345, "never-held"), wiretest.Ping(owner+1))
	c.Expect(t, resp(wire.OpNotHeld, owner))
	c.Expect(t, resp(wire.OpPing, owner+1))
}

func TestAdmissionWaitersGate(t *testing.T) {
	ts := startServer(t, withLimits(big, big, 10))
	h, w, c := ts.dial(t), ts.dial(t), ts.dial(t)
	h.Send(t, wiretest.Acquire(1, 0, 60, "k"))
	tok := h.ExpectGrant(t, 1)

	queueWaiters(t, ts, w, "k", 101, 9, 9) // 8 waiters < 9: each admitted
	w.ExpectSilent(t, 100*time.Millisecond)

	// 9 waiters = 90% of 10: an acquire that would wait is B.
	c.Send(t, wiretest.Acquire(2, 60, 60, "k"))
	c.Expect(t, resp(wire.OpBusy, 2))
	if st := ts.node.Stats(); !st.WaitersGate || st.PendingGate || st.KeysGate || st.Waiters != 9 {
		t.Fatalf("stats %+v, want only the waiters gate closed and 9 waiters", st)
	}
	// The waiters gate refuses only acquires that would wait.
	c.Send(t, wiretest.Acquire(3, 60, 60, "free"))
	free := c.ExpectGrant(t, 3)
	c.Send(t, wiretest.Acquire(4, 0, 60, "k"))
	c.Expect(t, resp(wire.OpTimeout, 4))
	c.Send(t, wiretest.Acquire(5, 60, 60, "free"))
	c.Expect(t, resp(wire.OpBusy, 5))
	releaseAndPingServed(t, c, 6)
	c.Send(t, wiretest.Release(8, free, "free"))
	c.Expect(t, resp(wire.OpRelease, 8))

	// Down to 8 waiters: still closed (8 is not below 7.5).
	tok = handOn(t, ts, h, 9, tok, w, 101, 8)
	c.Send(t, wiretest.Acquire(10, 60, 60, "k"))
	c.Expect(t, resp(wire.OpBusy, 10))

	// Down to 7: open again; two more waiters are admitted (7 -> 8 -> 9), the next is B.
	handOn(t, ts, w, 11, tok, w, 102, 7)
	c.Send(t, wiretest.Acquire(12, 60, 60, "k"))
	ts.waitWaiters(t, 8)
	c.Send(t, wiretest.Acquire(13, 60, 60, "k"))
	ts.waitWaiters(t, 9)
	c.ExpectSilent(t, 100*time.Millisecond)
	c.Send(t, wiretest.Acquire(14, 60, 60, "k"))
	c.Expect(t, resp(wire.OpBusy, 14))
}

func TestAdmissionKeysGate(t *testing.T) {
	ts := startServer(t, withLimits(big, 10, big))
	c, w := ts.dial(t), ts.dial(t)
	tokens := make([]uint64, 9)
	for i := range tokens {
		c.Send(t, wiretest.Acquire(uint64(i+1), 0, 60, fmt.Sprintf("k%d", i)))
		tokens[i] = c.ExpectGrant(t, uint64(i+1))
	}
	// 9 keys = 90% of 10: a key not in the table is B, with or without wait.
	c.Send(t, wiretest.Acquire(20, 0, 60, "new"), wiretest.Acquire(21, 30, 60, "new"))
	c.Expect(t, resp(wire.OpBusy, 20))
	c.Expect(t, resp(wire.OpBusy, 21))
	if st := ts.node.Stats(); !st.KeysGate || st.PendingGate || st.WaitersGate || st.Keys != 9 {
		t.Fatalf("stats %+v, want only the keys gate closed and 9 keys", st)
	}
	// Keys in the table are still served: T with wait 0, a waiter with wait > 0.
	c.Send(t, wiretest.Acquire(22, 0, 60, "k0"))
	c.Expect(t, resp(wire.OpTimeout, 22))
	w.Send(t, wiretest.Acquire(23, 60, 60, "k0"))
	ts.waitWaiters(t, 1)
	w.ExpectSilent(t, 100*time.Millisecond)
	releaseAndPingServed(t, c, 24)

	// Down to 8 keys: still closed.
	c.Send(t, wiretest.Release(30, tokens[8], "k8"))
	c.Expect(t, resp(wire.OpRelease, 30))
	c.Send(t, wiretest.Acquire(31, 0, 60, "new"))
	c.Expect(t, resp(wire.OpBusy, 31))
	// Down to 7: open; two new keys fit (7 -> 8 -> 9), the next is B.
	c.Send(t, wiretest.Release(32, tokens[7], "k7"))
	c.Expect(t, resp(wire.OpRelease, 32))
	c.Send(t, wiretest.Acquire(33, 0, 60, "new"))
	c.ExpectGrant(t, 33)
	c.Send(t, wiretest.Acquire(34, 0, 60, "new2"))
	c.ExpectGrant(t, 34)
	c.Send(t, wiretest.Acquire(35, 0, 60, "new3"))
	c.Expect(t, resp(wire.OpBusy, 35))
	// Handing a held key to its waiter is not refused: the key stays in the table.
	c.Send(t, wiretest.Release(36, tokens[0], "k0"))
	c.Expect(t, resp(wire.OpRelease, 36))
	w.ExpectGrant(t, 23)
	if st := ts.node.Stats(); st.Keys != 9 {
		t.Fatalf("%d keys, want 9", st.Keys)
	}
}

func TestAdmissionPendingGate(t *testing.T) {
	ts := startServer(t, withLimits(10, big, big))
	h, w, c := ts.dial(t), ts.dial(t), ts.dial(t)
	h.Send(t, wiretest.Acquire(1, 0, 60, "k"))
	tok := h.ExpectGrant(t, 1)
	queueWaiters(t, ts, w, "k", 101, 9, 9)
	w.ExpectSilent(t, 100*time.Millisecond)

	// 9 pending acquires = 90% of 10: every acquire is B, whatever its key and wait.
	c.Send(t,
		wiretest.Acquire(2, 0, 60, "free"),
		wiretest.Acquire(3, 60, 60, "free"),
		wiretest.Acquire(4, 0, 60, "k"),
		wiretest.Acquire(5, 60, 60, "k"),
	)
	for owner := uint64(2); owner <= 5; owner++ {
		c.Expect(t, resp(wire.OpBusy, owner))
	}
	if st := ts.node.Stats(); !st.PendingGate || st.Pending != 9 || st.Keys != 1 {
		t.Fatalf("stats %+v, want the pending gate closed, 9 pending, 1 key", st)
	}
	releaseAndPingServed(t, c, 6)

	// Down to 8: still closed.
	tok = handOn(t, ts, h, 9, tok, w, 101, 8)
	c.Send(t, wiretest.Acquire(10, 0, 60, "free"))
	c.Expect(t, resp(wire.OpBusy, 10))
	// Down to 7: open.
	handOn(t, ts, w, 11, tok, w, 102, 7)
	c.Send(t, wiretest.Acquire(12, 0, 60, "free"))
	c.ExpectGrant(t, 12)
	if st := ts.node.Stats(); st.PendingGate {
		t.Fatalf("stats %+v, want the pending gate open", st)
	}
}

// While every gate is closed at once, releases grant waiters and pings are answered.
func TestAdmissionNeverRefusesReleaseOrPing(t *testing.T) {
	ts := startServer(t, withLimits(10, 10, 10))
	h, w := ts.dial(t), ts.dial(t)
	tokens := make([]uint64, 9)
	for i := range tokens {
		h.Send(t, wiretest.Acquire(uint64(i+1), 0, 60, fmt.Sprintf("k%d", i)))
		tokens[i] = h.ExpectGrant(t, uint64(i+1))
	}
	queueWaiters(t, ts, w, "k0", 101, 9, 9)
	if st := ts.node.Stats(); !st.PendingGate || !st.KeysGate || !st.WaitersGate {
		t.Fatalf("stats %+v, want every gate closed", st)
	}
	// Pipelined: pings and releases interleaved with refused acquires.
	h.Send(t,
		wiretest.Ping(50),
		wiretest.Acquire(51, 0, 60, "new"),
		wiretest.Release(52, tokens[0], "k0"),
		wiretest.Release(53, tokens[1], "k1"),
		wiretest.Ping(54),
	)
	want := map[uint64]wire.Op{50: wire.OpPing, 51: wire.OpBusy, 52: wire.OpRelease, 53: wire.OpRelease, 54: wire.OpPing}
	for range want {
		r := h.Next(t)
		if op, ok := want[r.Owner]; !ok || r.Op != op {
			t.Fatalf("got %s, want one of %v", wiretest.Describe(r), want)
		}
		delete(want, r.Owner)
	}
	w.ExpectGrant(t, 101) // the release of k0 handed it to the head waiter
}

// Section 6: a gate closes when its gauge reaches 90%, whenever that happens, not only when an
// acquire happens to look at the gauge. Here the gauge reaches 9 of 10 through an admitted
// acquire (it saw 8), then falls back to 8 before the next acquire, with nothing reading the
// gauges in between: the gate has closed at 9 and stays closed at 8 (not below 7.5).
func TestAdmissionGateClosesAtPeak(t *testing.T) {
	t.Run("keys", func(t *testing.T) {
		ts := startServer(t, withLimits(big, 10, big))
		c := ts.dial(t)
		var last uint64
		for i := range 9 {
			c.Send(t, wiretest.Acquire(uint64(i+1), 0, 60, fmt.Sprintf("k%d", i)))
			last = c.ExpectGrant(t, uint64(i+1)) // the 9th saw 8 keys
		}
		c.Send(t, wiretest.Release(20, last, "k8")) // 8 keys
		c.Expect(t, resp(wire.OpRelease, 20))
		c.Send(t, wiretest.Acquire(21, 0, 60, "new"))
		c.Expect(t, resp(wire.OpBusy, 21))
	})
	t.Run("waiters", func(t *testing.T) {
		ts := startServer(t, withLimits(big, big, 10))
		h, w, c := ts.dial(t), ts.dial(t), ts.dial(t)
		h.Send(t, wiretest.Acquire(1, 0, 60, "k"))
		tok := h.ExpectGrant(t, 1)
		frames := make([][]byte, 0, 10)
		for i := range 9 {
			frames = append(frames, wiretest.Acquire(uint64(101+i), 60, 60, "k"))
		}
		w.Send(t, append(frames, wiretest.Ping(200))...) // the pong says all 9 are queued
		w.Expect(t, resp(wire.OpPing, 200))
		h.Send(t, wiretest.Release(2, tok, "k")) // the head is granted: 8 waiters
		h.Expect(t, resp(wire.OpRelease, 2))
		w.ExpectGrant(t, 101)
		c.Send(t, wiretest.Acquire(3, 2, 60, "k")) // a wrong server queues it: T after 2 s
		c.Expect(t, resp(wire.OpBusy, 3))
	})
}
