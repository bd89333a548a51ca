package behaviour

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// cases are run in this order by Run. Section numbers are docs/protocol.md's.
var cases = []struct {
	name string
	run  func(t *testing.T, s *suite)
}{
	{"grant-release", grantRelease},
	{"wrong-token", wrongToken},
	{"owner-is-not-identity", ownerIsNotIdentity},
	{"ping", ping},
	{"tokens-increase-across-keys", tokensIncreaseAcrossKeys},
	{"bad-key", badKey},
	{"pipelined-by-owner", pipelinedByOwner},
	{"waiters-fifo", waitersFIFO},
	{"waiters-per-key", waitersPerKey},
	{"waiter-times-out", waiterTimesOut},
	{"wait-counts-from-read", waitCountsFromRead},
	{"timed-out-waiter-is-skipped", timedOutWaiterIsSkipped},
	{"lease-expires", leaseExpires},
	{"lease-runs-from-grant", leaseRunsFromGrant},
	{"expired-lease-seen-by-release", expiredLeaseSeenByRelease},
}

// Sections 1 and 4: a free key is granted with a token; held, an acquire with wait 0 is T at
// once; any connection may release with the token; then the key is free again, and its next
// grant has a larger token.
func grantRelease(t *testing.T, s *suite) {
	a, b := s.dial(t), s.dial(t)
	job := s.key("job")
	t1 := a.Grant(t, 1, 0, 30, job)
	if t1 == 0 || t1 > wire.MaxToken {
		t.Fatalf("token %d outside 1..%d", t1, wire.MaxToken)
	}
	b.Send(t, wiretest.Acquire(2, 0, 30, job))
	b.Expect(t, resp(wire.OpTimeout, 2))
	// There is no session that owns locks: any connection may release with the token.
	release(t, b, 3, t1, job)
	a.Send(t, wiretest.Release(4, t1, job))
	a.Expect(t, resp(wire.OpNotHeld, 4))
	t2 := b.Grant(t, 5, 0, 30, job)
	if t2 <= t1 {
		t.Fatalf("token %d after %d: tokens must strictly increase", t2, t1)
	}
	release(t, b, 6, t2, job)
}

// Section 4: a release with a token that does not hold the key is N and leaves the holder
// alone; a release of a free key is N; token 0 never matches.
func wrongToken(t *testing.T, s *suite) {
	c, probe := s.dial(t), s.dial(t)
	k := s.key("k")
	c.Send(t, wiretest.Release(1, 1, s.key("free")), wiretest.Release(2, 0, s.key("free")))
	c.Expect(t, resp(wire.OpNotHeld, 1))
	c.Expect(t, resp(wire.OpNotHeld, 2))
	tok := c.Grant(t, 3, 0, 30, k)
	for i, wrong := range []uint64{tok + 1, tok - 1, 0, wire.MaxToken} {
		owner := uint64(10 + i)
		c.Send(t, wiretest.Release(owner, wrong, k))
		c.Expect(t, resp(wire.OpNotHeld, owner))
	}
	probe.Send(t, wiretest.Acquire(20, 0, 30, k))
	probe.Expect(t, resp(wire.OpTimeout, 20)) // still held
	release(t, c, 21, tok, k)
	c.Send(t, wiretest.Release(22, tok, k))
	c.Expect(t, resp(wire.OpNotHeld, 22))
}

// Section 1: owner is only a correlation id. Sending the same owner again never returns the
// active token and never extends a lease.
func ownerIsNotIdentity(t *testing.T, s *suite) {
	c, other := s.dial(t), s.dial(t)
	k := s.key("k")
	tok := c.Grant(t, 1, 0, 30, k)
	c.Send(t, wiretest.Acquire(1, 0, 30, k))
	c.Expect(t, resp(wire.OpTimeout, 1))
	other.Send(t, wiretest.Acquire(1, 0, 30, k))
	other.Expect(t, resp(wire.OpTimeout, 1))
	release(t, other, 1, tok, k)
}

// Section 2: P echoes its owner, byte for byte.
func ping(t *testing.T, s *suite) {
	c := s.dial(t)
	for _, owner := range []uint64{1, 2, 0x0A, 1 << 40, 1<<64 - 1} {
		c.Send(t, wiretest.Ping(owner))
		c.ExpectBytes(t, wiretest.Short(wire.OpPing, owner))
	}
}

// Tokens strictly increase across all grants of all keys and all connections.
func tokensIncreaseAcrossKeys(t *testing.T, s *suite) {
	conns := []*wiretest.Conn{s.dial(t), s.dial(t), s.dial(t)}
	var last uint64
	held := map[string]uint64{}
	for i := range 60 {
		c := conns[i%len(conns)]
		key := s.key(fmt.Sprintf("key-%d", i%7))
		owner := uint64(i + 1)
		if tok, ok := held[key]; ok && i%2 == 0 {
			release(t, c, owner, tok, key)
			delete(held, key)
			continue
		}
		c.Send(t, wiretest.Acquire(owner, 0, 60, key))
		r := c.Next(t)
		if _, ok := held[key]; ok {
			if r != resp(wire.OpTimeout, owner) {
				t.Fatalf("acquire of held %s: got %s, want T", key, wiretest.Describe(r))
			}
			continue
		}
		if r.Op != wire.OpAcquire || r.Owner != owner || r.Token <= last {
			t.Fatalf("acquire of free %s: got %s, want A with a token above %d", key, wiretest.Describe(r), last)
		}
		last = r.Token
		held[key] = r.Token
	}
}

// Sections 4 and 5: a key that breaks the rules is E bad_key with the request's owner, for
// acquires (with and without wait) and releases, and the connection stays.
func badKey(t *testing.T, s *suite) {
	c := s.dial(t)
	bad := map[string]string{
		"empty":        "",
		"129 bytes":    strings.Repeat("k", 129),
		"invalid utf8": "k\xffey",
		"space":        "k ey",
		"tab":          "k\tey",
	}
	owner := uint64(100)
	for name, key := range bad {
		t.Run(name, func(t *testing.T) {
			owner += 3
			c.Send(t, wiretest.Acquire(owner, 0, 30, key))
			c.ExpectError(t, owner, wire.ReasonBadKey)
			c.Send(t, wiretest.Acquire(owner+1, 5, 30, key))
			c.ExpectError(t, owner+1, wire.ReasonBadKey)
			c.Send(t, wiretest.Release(owner+2, 1, key))
			c.ExpectError(t, owner+2, wire.ReasonBadKey)
			c.Alive(t, 1<<40+owner)
		})
	}
	// 128 bytes is the longest key there is.
	long := s.key(strings.Repeat("k", 128-len(s.key(""))))
	tok := c.Grant(t, 1, 0, 30, long)
	release(t, c, 2, tok, long)
}

// Section 2: pipelined requests in one write each get exactly one answer, matched by owner
// (in whatever order they come).
func pipelinedByOwner(t *testing.T, s *suite) {
	c, holder := s.dial(t), s.dial(t)
	holder.Grant(t, 1, 0, 60, s.key("held"))
	const n = 25
	want := map[uint64]wire.Op{}
	var frames [][]byte
	add := func(frame []byte, owner uint64, op wire.Op) { frames, want[owner] = append(frames, frame), op }
	for i := range uint64(n) {
		base := 1000 + 5*i
		add(wiretest.Acquire(base, 0, 60, s.key(fmt.Sprint("free-", i))), base, wire.OpAcquire)
		add(wiretest.Ping(base+1), base+1, wire.OpPing)
		add(wiretest.Acquire(base+2, 0, 60, s.key("held")), base+2, wire.OpTimeout)
		add(wiretest.Release(base+3, 1<<40+i, s.key("nobody")), base+3, wire.OpNotHeld)
		add(wiretest.Acquire(base+4, 0, 60, ""), base+4, wire.OpError)
	}
	c.Send(t, frames...)
	got := c.NextByOwner(t, len(want))
	tokens := map[uint64]uint64{}
	for owner, op := range want {
		r, ok := got[owner]
		if !ok || r.Op != op {
			t.Fatalf("owner %d: got %s (answered: %v), want op %v", owner, wiretest.Describe(r), ok, op)
		}
		if op == wire.OpAcquire {
			if o, dup := tokens[r.Token]; dup {
				t.Fatalf("token %d granted to owners %d and %d", r.Token, o, owner)
			}
			tokens[r.Token] = owner
		}
	}
	c.ExpectSilent(t, 100*time.Millisecond) // exactly one answer each
}

// Section 7: waiters of a key are granted strictly in arrival order as the holder releases,
// each with a larger token; only the head is granted.
func waitersFIFO(t *testing.T, s *suite) {
	k := s.key("fifo")
	holder := s.dial(t)
	tok := holder.Grant(t, 1, 0, 60, k)

	const n = 6
	waiters := make([]*wiretest.Conn, n)
	for i := range waiters {
		waiters[i] = s.dial(t)
		waiters[i].Send(t, wiretest.Acquire(uint64(100+i), 60, 60, k))
		s.waitWaiters(t, i+1) // the next one arrives strictly later
	}
	for i, w := range waiters {
		holder.Send(t, wiretest.Release(uint64(200+i), tok, k))
		holder.Expect(t, resp(wire.OpRelease, uint64(200+i)))
		next := w.ExpectGrant(t, uint64(100+i))
		if next <= tok {
			t.Fatalf("waiter %d got token %d, not above %d", i, next, tok)
		}
		tok = next
		s.waitWaiters(t, n-1-i) // only the head was granted: the others still wait
	}
	for _, w := range waiters {
		w.ExpectSilent(t, 50*time.Millisecond) // exactly one answer each
	}
	release(t, holder, 300, tok, k)
}

// Waiters on several keys queue independently; each release grants its own key's head.
func waitersPerKey(t *testing.T, s *suite) {
	x, y := s.key("x"), s.key("y")
	h := s.dial(t)
	h.Send(t, wiretest.Acquire(1, 0, 60, x), wiretest.Acquire(2, 0, 60, y))
	got := h.NextByOwner(t, 2)
	tx, ty := got[1].Token, got[2].Token
	if got[1].Op != wire.OpAcquire || got[2].Op != wire.OpAcquire {
		t.Fatalf("grants of two free keys: %s, %s", wiretest.Describe(got[1]), wiretest.Describe(got[2]))
	}
	wx, wy := s.dial(t), s.dial(t)
	wx.Send(t, wiretest.Acquire(10, 30, 60, x))
	wy.Send(t, wiretest.Acquire(20, 30, 60, y))
	s.waitWaiters(t, 2)
	release(t, h, 3, ty, y)
	ny := wy.ExpectGrant(t, 20)
	wx.ExpectSilent(t, 200*time.Millisecond)
	release(t, h, 4, tx, x)
	nx := wx.ExpectGrant(t, 10)
	h.Send(t, wiretest.Release(5, nx, x), wiretest.Release(6, ny, y))
	for owner, r := range h.NextByOwner(t, 2) {
		if r.Op != wire.OpRelease {
			t.Fatalf("release %d: %s", owner, wiretest.Describe(r))
		}
	}
}

// A waiter whose wait runs out gets T; never before its wait has passed.
func waiterTimesOut(t *testing.T, s *suite) {
	k := s.key("k")
	h, w := s.dial(t), s.dial(t)
	tok := h.Grant(t, 1, 0, 60, k)
	start := time.Now()
	w.Send(t, wiretest.Acquire(2, 1, 60, k))
	w.Expect(t, resp(wire.OpTimeout, 2))
	clustertest.Between(t, "T for wait=1", time.Since(start), time.Second, time.Second+Slack)
	s.waitWaiters(t, 0)
	w.Alive(t, 3)
	release(t, h, 4, tok, k)
}

// Section 7: T comes when wait seconds have passed since the server read the frame, not since
// the waiter reached the head of its queue.
func waitCountsFromRead(t *testing.T, s *suite) {
	k := s.key("k")
	h, first, second := s.dial(t), s.dial(t), s.dial(t)
	tok := h.Grant(t, 1, 0, 60, k)
	start := time.Now()
	first.Send(t, wiretest.Acquire(2, 5, 60, k))
	s.waitWaiters(t, 1)
	secondSent := time.Now()
	second.Send(t, wiretest.Acquire(3, 2, 60, k))
	// second is behind first, whose wait is longer: it must time out on its own clock (~2 s),
	// not 2 s after first has left the head (~7 s).
	second.Expect(t, resp(wire.OpTimeout, 3))
	clustertest.Between(t, "T for the second waiter (wait=2)", time.Since(secondSent), 2*time.Second, 5*time.Second)
	first.Expect(t, resp(wire.OpTimeout, 2))
	clustertest.Between(t, "T for the first waiter (wait=5)", time.Since(start), 5*time.Second, 5*time.Second+Slack)
	release(t, h, 4, tok, k)
}

// A waiter that times out leaves the queue: the next one behind it is granted on release.
func timedOutWaiterIsSkipped(t *testing.T, s *suite) {
	k := s.key("k")
	h, w1, w2 := s.dial(t), s.dial(t), s.dial(t)
	tok := h.Grant(t, 1, 0, 60, k)
	w1.Send(t, wiretest.Acquire(2, 2, 60, k)) // long enough to see both waiters queued
	s.waitWaiters(t, 1)
	w2.Send(t, wiretest.Acquire(3, 60, 60, k))
	s.waitWaiters(t, 2)
	w1.Expect(t, resp(wire.OpTimeout, 2))
	release(t, h, 4, tok, k)
	next := w2.ExpectGrant(t, 3)
	if next <= tok {
		t.Fatalf("token %d not above %d", next, tok)
	}
	release(t, w2, 5, next, k)
}
