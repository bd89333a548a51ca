package cluster

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// These cases pin how the leader's lock view recovers when a release or an expiry of its own
// holder does not come back as planned: the view must never keep a key blocked (every later
// acquire T) that the log has freed, and never free one early.

// newcomerGranted checks that nothing holds "k" any more: a new session's acquire of it
// (owner 2, waiting wait seconds) is granted once the log commits it.
func newcomerGranted(t *testing.T, h *harness, log *fakeLog, wait uint8) {
	t.Helper()
	b, rb := h.conn()
	h.acquire(b, 2, "k", wait, 30)
	log.commit()
	want(t, rb.one(t), wire.OpAcquire, 2)
}

// A release that fails (not applied, e.g. a full proposal queue) keeps the holder, and its
// lease still ends: the expiry the sweep skipped while the release was out is armed again.
func TestFailedReleaseKeepsTheLeaseRunning(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 2)
	h.n.Release(a, 2, []byte("k"), tok)
	h.clock.Advance(3 * time.Second)
	if n := h.n.Sweep(); n != 0 { // the release is out: nothing to expire yet
		t.Fatalf("swept %d while the release was proposed", n)
	}
	log.failAll(outcome.Unavailable)
	if got := want(t, ra.one(t), wire.OpError, 2); got.Reason != wire.ReasonUnavailable {
		t.Fatalf("failed release answered %+v, want E unavailable", got)
	}
	if n := h.n.Sweep(); n != 1 {
		t.Fatalf("swept %d after the failed release, want the holder's expiry (its lease is over)", n)
	}
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire || fsm.Token(tok) != cmds[0].Token {
		t.Fatalf("entries %s, want the expiry of token %d", kinds(cmds), tok)
	}
	b, rb := h.conn()
	h.acquire(b, 3, "k", 0, 30)
	log.commit()
	if got := want(t, rb.one(t), wire.OpAcquire, 3); got.Token <= tok {
		t.Fatalf("token %d after the expiry, not above %d", got.Token, tok)
	}
}

// An expiry answered "maybe applied" that did apply: its retry comes back stale, and the view
// takes the log's word that the key is free, so a waiter gets it.
func TestStaleExpiryRetryFreesTheKey(t *testing.T) {
	h, log := leadingReplicated(t)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 2)
	log.commit()
	want(t, ra.one(t), wire.OpAcquire, 1)
	h.clock.Advance(2 * time.Second) // the expiry timer proposes it at the lease end
	if n := log.pending(); n != 1 {
		t.Fatalf("%d proposed at the lease end, want the expiry", n)
	}
	for _, p := range log.take() { // applied, but the wait for it timed out
		log.mu.Lock()
		log.table.ApplyCommand(p.cmd)
		log.mu.Unlock()
		p.done(fsm.Result{}, outcome.Indeterminate)
	}
	h.clock.Advance(time.Second) // the timer, re-armed for the retry
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire {
		t.Fatalf("retry entries %s, want the expiry again", kinds(cmds))
	}
	newcomerGranted(t, h, log, 5)
}

// A grant whose result arrives after a new term began (Follow, then Lead rebuilt the view
// from the log with that grant in it), for a client that has left: it is given back through
// the view, so the key is free at once instead of looking held until its lease ends.
func TestLateGrantGivenBackInTheNewEpoch(t *testing.T) {
	h, log := leadingReplicated(t)
	a, _ := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	q := log.take()
	log.mu.Lock()
	r := log.table.ApplyCommand(q[0].cmd)
	log.mu.Unlock()
	h.n.Follow()
	h.n.Lead()
	h.n.Detach(a)
	q[0].done(r, nil)
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdRelease || cmds[0].Token != r.Token {
		t.Fatalf("entries %s, want the give-back release of token %d", kinds(cmds), r.Token)
	}
	newcomerGranted(t, h, log, 0)
}

// An acquire proposed before Drain whose answer is Held is not queued: Drain stopped
// granting, so it is answered E unavailable (never granted: the client may go elsewhere).
func TestDrainDoesNotQueueAHeldAnswer(t *testing.T) {
	h, log := leadingReplicated(t)
	a, ra := h.conn()
	b, rb := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	h.acquire(b, 2, "k", 60, 30) // the view shows k free: both are proposed
	h.n.Drain()
	log.commit()
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	if got := want(t, rb.one(t), wire.OpError, 2); got.Reason != wire.ReasonUnavailable {
		t.Fatalf("held answer after Drain: %+v, want E unavailable", got)
	}
	h.n.Release(a, 3, []byte("k"), tok)
	log.commit()
	want(t, ra.one(t), wire.OpRelease, 3)
	rb.none(t)
}

// A release answered "maybe applied" that did apply: the client's retry is answered N by the
// log, and the view takes the log's word that the key is free instead of keeping it held.
func TestNotHeldRetryFreesTheKey(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 30)
	h.n.Release(a, 2, []byte("k"), tok)
	for _, p := range log.take() {
		log.mu.Lock()
		log.table.ApplyCommand(p.cmd)
		log.mu.Unlock()
		p.done(fsm.Result{}, outcome.Indeterminate)
	}
	if got := want(t, ra.one(t), wire.OpError, 2); got.Reason != wire.ReasonIndeterminate {
		t.Fatalf("release answered %+v, want E indeterminate", got)
	}
	h.n.Release(a, 3, []byte("k"), tok)
	log.commit()
	want(t, ra.one(t), wire.OpNotHeld, 3)
	b, rb := h.conn()
	h.acquire(b, 4, "k", 0, 30)
	log.commit()
	if got := want(t, rb.one(t), wire.OpAcquire, 4); got.Token <= tok {
		t.Fatalf("token %d, not above %d", got.Token, tok)
	}
}
