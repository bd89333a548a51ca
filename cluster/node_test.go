package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// recorder is a Replier that keeps every response.
type recorder struct {
	mu  sync.Mutex
	got []wire.Response
}

func (r *recorder) Reply(resp wire.Response) {
	r.mu.Lock()
	r.got = append(r.got, resp)
	r.mu.Unlock()
}

// take returns and forgets what was recorded so far.
func (r *recorder) take() []wire.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// one returns the single recorded response, failing otherwise.
func (r *recorder) one(t *testing.T) wire.Response {
	t.Helper()
	g := r.take()
	if len(g) != 1 {
		t.Fatalf("want exactly one response, got %d: %+v", len(g), g)
	}
	return g[0]
}

func (r *recorder) none(t *testing.T) {
	t.Helper()
	if g := r.take(); len(g) != 0 {
		t.Fatalf("want no response yet, got %+v", g)
	}
}

type harness struct {
	t     *testing.T
	n     *Node
	clock *clustertest.FakeClock
}

func newHarness(t *testing.T, mut func(*Config)) *harness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Clock = newFakeClock()
	if mut != nil {
		mut(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if err := n.view.check(); err != nil {
			t.Errorf("view at the end of the test: %v", err)
		}
	})
	return &harness{t: t, n: n, clock: cfg.Clock.(*clustertest.FakeClock)}
}

func (h *harness) conn() (*Session, *recorder) {
	r := &recorder{}
	return h.n.Attach(r, ""), r
}

func (h *harness) acquire(c *Session, owner uint64, key string, wait uint8, lease uint16) {
	h.n.Acquire(c, owner, []byte(key), wait, lease, h.clock.Now())
}

func want(t *testing.T, got wire.Response, op wire.Op, owner uint64) wire.Response {
	t.Helper()
	if got.Op != op || got.Owner != owner {
		t.Fatalf("got %c owner %d (%+v), want %c owner %d", got.Op, got.Owner, got, op, owner)
	}
	return got
}

func TestGrantWaitReleaseFIFO(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	tok1 := want(t, ra.one(t), wire.OpAcquire, 1).Token
	if tok1 != 1 {
		t.Fatalf("first token %d, want 1", tok1)
	}
	h.acquire(a, 2, "k", 0, 30)
	want(t, ra.one(t), wire.OpTimeout, 2)

	// Three waiters on three connections queue in arrival order.
	var conns []*Session
	var recs []*recorder
	for i := range 3 {
		c, r := h.conn()
		conns, recs = append(conns, c), append(recs, r)
		h.acquire(c, uint64(10+i), "k", 60, 30)
		r.none(t)
	}
	if s := h.n.Stats(); s.Waiters != 3 || s.Pending != 3 {
		t.Fatalf("stats %+v, want 3 waiters and 3 pending", s)
	}
	prev := tok1
	holder, holderTok := a, tok1
	for i := range 3 {
		h.n.Release(holder, 99, []byte("k"), holderTok)
		if holder == a {
			want(t, ra.one(t), wire.OpRelease, 99)
		} else {
			want(t, recs[i-1].take()[0], wire.OpRelease, 99)
		}
		got := want(t, recs[i].one(t), wire.OpAcquire, uint64(10+i))
		if got.Token <= prev {
			t.Fatalf("waiter %d token %d not above previous %d", i, got.Token, prev)
		}
		prev, holder, holderTok = got.Token, conns[i], got.Token
	}
	if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 || s.Keys != 1 {
		t.Fatalf("stats %+v, want 1 key, no waiters", s)
	}
}

func TestReleaseWrongTokenIsNotHeld(t *testing.T) {
	h := newHarness(t, nil)
	c, r := h.conn()
	h.n.Release(c, 1, []byte("free"), 1)
	want(t, r.one(t), wire.OpNotHeld, 1)
	h.acquire(c, 2, "k", 0, 30)
	tok := r.one(t).Token
	for _, bad := range []uint64{0, tok + 1, tok - 1} {
		h.n.Release(c, 3, []byte("k"), bad)
		want(t, r.one(t), wire.OpNotHeld, 3)
	}
	h.n.Release(c, 4, []byte("k"), tok)
	want(t, r.one(t), wire.OpRelease, 4)
	h.n.Release(c, 5, []byte("k"), tok)
	want(t, r.one(t), wire.OpNotHeld, 5)
}

func TestWaitTimesOutFromReadTime(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 300)
	ra.take()
	b, rb := h.conn()
	// The frame was read 1.5 s before the node decides it: 0.5 s of the 2 s wait are left.
	readAt := h.clock.Now()
	h.clock.Advance(1500 * time.Millisecond)
	h.n.Acquire(b, 7, []byte("k"), 2, 30, readAt)
	rb.none(t)
	h.clock.Advance(400 * time.Millisecond)
	rb.none(t)
	h.clock.Advance(100 * time.Millisecond)
	want(t, rb.one(t), wire.OpTimeout, 7)
	if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 {
		t.Fatalf("stats %+v after timeout", s)
	}
	// A wait that has already run out when decided is answered at once.
	h.n.Acquire(b, 8, []byte("k"), 1, 30, h.clock.Now().Add(-2*time.Second))
	want(t, rb.one(t), wire.OpTimeout, 8)
}

func TestLazyExpiry(t *testing.T) {
	h := newHarness(t, nil)
	c, r := h.conn()
	h.acquire(c, 1, "k", 0, 1)
	tok := r.one(t).Token
	h.clock.Advance(999 * time.Millisecond)
	h.acquire(c, 2, "k", 0, 1)
	want(t, r.one(t), wire.OpTimeout, 2) // never earlier than the lease
	h.clock.Advance(time.Millisecond)
	h.acquire(c, 3, "k", 0, 5)
	got := want(t, r.one(t), wire.OpAcquire, 3)
	if got.Token <= tok {
		t.Fatalf("token %d after expiry not above %d", got.Token, tok)
	}
	h.clock.Advance(5 * time.Second)
	h.n.Release(c, 4, []byte("k"), got.Token)
	want(t, r.one(t), wire.OpNotHeld, 4) // the lease ended before the release arrived
	if s := h.n.Stats(); s.Keys != 0 {
		t.Fatalf("keys %d after lazy expiry, want 0", s.Keys)
	}
}

func TestSweepFreesAndGrantsNextWaiter(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	b, rb := h.conn()
	h.acquire(a, 1, "k", 0, 1)
	h.acquire(a, 2, "other", 0, 100)
	ra.take()
	h.acquire(b, 3, "k", 30, 10)
	if n := h.n.Sweep(); n != 0 {
		t.Fatalf("sweep before any deadline freed %d", n)
	}
	h.clock.Advance(2 * time.Second)
	if n := h.n.Sweep(); n != 1 {
		t.Fatalf("sweep freed %d, want 1", n)
	}
	want(t, rb.one(t), wire.OpAcquire, 3)
	if s := h.n.Stats(); s.Keys != 2 || s.Waiters != 0 {
		t.Fatalf("stats %+v", s)
	}
	// The waiter's lease runs from its grant, not from its request.
	h.clock.Advance(9 * time.Second)
	if n := h.n.Sweep(); n != 0 {
		t.Fatalf("sweep freed %d before the granted lease ended", n)
	}
	h.clock.Advance(time.Second)
	if n := h.n.Sweep(); n != 1 {
		t.Fatalf("sweep freed %d at the lease end, want 1", n)
	}
}

func TestDetachDropsWaitersNotLocks(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	tok := ra.one(t).Token
	b, rb := h.conn()
	h.acquire(b, 2, "k", 60, 30)
	h.acquire(b, 3, "k", 60, 30)
	c, rc := h.conn()
	h.acquire(c, 4, "k", 60, 30)
	h.n.Detach(b)
	if s := h.n.Stats(); s.Waiters != 1 || s.Keys != 1 {
		t.Fatalf("stats %+v after detach, want 1 waiter, 1 key", s)
	}
	h.n.Detach(a) // the holder's connection closing releases nothing
	rc.none(t)
	h.n.Release(c, 5, []byte("k"), tok)
	got := rc.take()
	if len(got) != 2 {
		t.Fatalf("release with a waiter: %+v", got)
	}
	want(t, got[0], wire.OpRelease, 5)
	want(t, got[1], wire.OpAcquire, 4) // the detached waiters were skipped
	rb.none(t)
	h.clock.Advance(time.Minute) // their timers were stopped
	rb.none(t)
}

func TestDrainAnswersWaitersUnavailable(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	tok := ra.one(t).Token
	h.acquire(a, 2, "k", 10, 30)
	h.n.Drain()
	got := want(t, ra.one(t), wire.OpError, 2)
	if got.Reason != wire.ReasonUnavailable {
		t.Fatalf("reason %q", got.Reason)
	}
	h.acquire(a, 3, "free", 0, 30)
	if got := ra.one(t); got.Reason != wire.ReasonUnavailable {
		t.Fatalf("acquire while draining: %+v", got)
	}
	h.n.Release(a, 4, []byte("k"), tok)
	want(t, ra.one(t), wire.OpRelease, 4)
	if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 || !s.Draining {
		t.Fatalf("stats %+v", s)
	}
}

func TestTokenExhaustedForEveryAcquire(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.TokenFloor = 1<<63 - 3 })
	c, r := h.conn()
	h.acquire(c, 1, "a", 0, 30)
	if got := want(t, r.one(t), wire.OpAcquire, 1); got.Token != 1<<63-2 {
		t.Fatalf("token %d", got.Token)
	}
	h.acquire(c, 2, "b", 0, 30)
	if got := want(t, r.one(t), wire.OpAcquire, 2); got.Token != 1<<63-1 {
		t.Fatalf("token %d", got.Token)
	}
	for i, key := range []string{"c", "a", "b", "c"} {
		h.acquire(c, uint64(10+i), key, 5, 30) // free or held: token_exhausted
		if got := want(t, r.one(t), wire.OpError, uint64(10+i)); got.Reason != wire.ReasonTokenExhausted {
			t.Fatalf("key %s: %+v", key, got)
		}
	}
	h.n.Release(c, 20, []byte("a"), 1<<63-2)
	want(t, r.one(t), wire.OpRelease, 20)
	h.acquire(c, 21, "a", 0, 30)
	if got := r.one(t); got.Reason != wire.ReasonTokenExhausted {
		t.Fatalf("after release: %+v", got)
	}
}

func TestAdmissionGates(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxKeys = 10; c.MaxWaiters = 4; c.MaxPending = 1000 })
	c, r := h.conn()
	toks := map[string]uint64{}
	for i := range 9 {
		key := string(rune('a' + i))
		h.acquire(c, uint64(i+1), key, 0, 30)
		toks[key] = want(t, r.one(t), wire.OpAcquire, uint64(i+1)).Token
	}
	h.acquire(c, 100, "new", 0, 30)
	want(t, r.one(t), wire.OpBusy, 100) // 9 of 10 keys: gate closed
	h.acquire(c, 101, "a", 0, 30)
	want(t, r.one(t), wire.OpTimeout, 101) // held keys are not refused by the keys gate
	// Waiters: limit 4 closes at 4 (3.6 rounded up), reopens below 3.
	for i := range 4 {
		h.acquire(c, uint64(200+i), "a", 60, 30)
	}
	h.acquire(c, 204, "a", 60, 30)
	want(t, r.one(t), wire.OpBusy, 204)
	r.none(t)
	// Free two keys: 7 of 10 is below 75%, the keys gate reopens. The release of "a" grants
	// a waiter (3 left: still closed).
	h.n.Release(c, 300, []byte("b"), toks["b"])
	h.n.Release(c, 301, []byte("c"), toks["c"])
	h.n.Release(c, 302, []byte("a"), toks["a"])
	got := r.take()
	if len(got) != 4 || got[3].Op != wire.OpAcquire || got[3].Owner != 200 {
		t.Fatalf("releases and grant: %+v", got)
	}
	h.acquire(c, 303, "a", 60, 30)
	want(t, r.one(t), wire.OpBusy, 303) // 3 waiters: not below 75% of 4
	h.acquire(c, 304, "new", 0, 30)
	want(t, r.one(t), wire.OpAcquire, 304)
	h.n.Release(c, 305, []byte("a"), got[3].Token)
	r.take()
	h.acquire(c, 306, "a", 60, 30) // 2 waiters left: open again
	r.none(t)
	if s := h.n.Stats(); s.Waiters != 3 || s.WaitersGate {
		t.Fatalf("stats %+v", s)
	}
}

func TestPendingGate(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxPending = 2 })
	c, r := h.conn()
	h.acquire(c, 1, "k", 0, 30)
	r.take()
	h.acquire(c, 2, "k", 60, 30) // pending 0 -> admitted, now 1
	h.acquire(c, 3, "k", 60, 30) // pending 1 of 2: below 90%, admitted
	r.none(t)
	h.acquire(c, 4, "other", 0, 30) // pending 2 >= 1.8: every acquire refused
	want(t, r.one(t), wire.OpBusy, 4)
	h.n.Release(c, 5, []byte("other"), 12345)
	want(t, r.one(t), wire.OpNotHeld, 5) // releases are never refused
}

func TestQueueCompactsTimedOutWaiters(t *testing.T) {
	h := newHarness(t, nil)
	c, r := h.conn()
	h.acquire(c, 1, "k", 0, 3600)
	r.take()
	for round := range 20 {
		for i := range 100 {
			h.acquire(c, uint64(1000*round+i+10), "k", 1, 30)
		}
		h.clock.Advance(time.Second)
		if got := len(r.take()); got != 100 {
			t.Fatalf("round %d: %d timeouts, want 100", round, got)
		}
	}
	ks := h.n.view.keys["k"]
	if ks.q != nil && len(ks.q.ws)-ks.q.head > 200 {
		t.Fatalf("queue keeps %d finished waiters; compaction is not working", len(ks.q.ws)-ks.q.head)
	}
}

func TestExhaustionAnswersQueuedWaiters(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.TokenFloor = 1<<63 - 2 })
	a, ra := h.conn()
	b, rb := h.conn()
	h.acquire(a, 1, "k", 0, 30) // token 2^63-1: the last one
	want(t, ra.one(t), wire.OpAcquire, 1)
	h.acquire(b, 2, "k", 60, 30)
	if got := rb.one(t); got.Op != wire.OpError || got.Reason != wire.ReasonTokenExhausted {
		t.Fatalf("acquire after the last token: %+v", got)
	}

	h = newHarness(t, func(c *Config) { c.TokenFloor = 1<<63 - 3 })
	a, ra = h.conn()
	b, rb = h.conn()
	h.acquire(a, 1, "k", 0, 30)
	want(t, ra.one(t), wire.OpAcquire, 1)
	h.acquire(b, 2, "k", 60, 30) // queued while one token is left
	h.acquire(b, 3, "other", 0, 30)
	got := rb.take()
	if len(got) != 2 || got[0].Op != wire.OpAcquire || got[0].Owner != 3 ||
		got[1].Op != wire.OpError || got[1].Owner != 2 || got[1].Reason != wire.ReasonTokenExhausted {
		t.Fatalf("the last grant must answer the queued waiter token_exhausted at once: %+v", got)
	}
	if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// check verifies the view: its holders, and that bare counts the key states without one.
func (v *view) check() error {
	if err := v.held.Check(); err != nil {
		return err
	}
	bare := 0
	for k, ks := range v.keys {
		if ks.key != k {
			return fmt.Errorf("key state of %q filed under %q", ks.key, k)
		}
		if _, ok := v.held.Lookup(k); !ok {
			bare++
		}
	}
	if bare != v.bare {
		return fmt.Errorf("bare is %d, %d key states have no holder", v.bare, bare)
	}
	for k := range v.extra {
		if _, ok := v.held.Lookup(k); !ok {
			return fmt.Errorf("extra kept for %q, which has no holder", k)
		}
	}
	return nil
}
