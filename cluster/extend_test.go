package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
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

// leasesOn switches revision 2 on in log's table, as the leader's feature switch does.
func leasesOn(t *testing.T, log *fakeLog) {
	t.Helper()
	log.Read(func(tb *fsm.Table) {
		if r := tb.ApplyCommand(fsm.Command{Kind: fsm.CmdEnable, Features: fsm.FeatureLeases}); r.Kind != fsm.Enabled {
			t.Fatalf("enable: %v", r.Kind)
		}
	})
}

// A leader extends through the log: the answer comes from the entry, the expiry of the
// extended lease carries the holder's extension count, and the lease ends at its new end.
func TestReplicatedExtendThroughTheLog(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 5)
	leasesOn(t, log)
	if h.n.Revisions() != wire.FlagLeases {
		t.Fatal("the switch is on in the log, but the node does not serve revision 2")
	}
	h.clock.Advance(4 * time.Second)
	h.extend(a, 2, "k", tok, 10)
	ra.none(t)                       // not before the entry applied
	h.clock.Advance(2 * time.Second) // past the first lease while the extend is in the log
	h.n.Sweep()
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdExtend || cmds[0].Lease != 10 || cmds[0].Token != fsm.Token(tok) {
		t.Fatalf("entries %s: want only the extend (no expiry of the lease it extends)", kinds(cmds))
	}
	want(t, ra.one(t), wire.OpExtend, 2)
	h.clock.Advance(9 * time.Second) // 15 s: 9 s after the extend applied
	h.n.Sweep()
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed before the extended lease ended", n)
	}
	h.clock.Advance(time.Second)
	cmds := log.commit()
	if len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire || cmds[0].Extensions != 1 {
		t.Fatalf("entries %s (%+v): want the expiry of the extended lease, for extension count 1", kinds(cmds), cmds)
	}
	if s := h.n.Stats(); s.Keys != 0 {
		t.Fatalf("stats %+v: the expiry for the right count frees the key", s)
	}
}

// An expiry made for a lease before an extend frees nothing after it: the table keeps the
// extended holder (Stale) and the view resyncs, with the lease restarted in full.
func TestReplicatedStaleExpiryAfterAnExtend(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 2)
	leasesOn(t, log)
	h.extend(a, 2, "k", tok, 30)
	log.commit()
	want(t, ra.one(t), wire.OpExtend, 2)
	// An Expire for count 0, as a leader would have proposed for the first lease, applies now.
	log.Submit(fsm.Command{Kind: fsm.CmdExpire, Key: []byte("k"), Token: fsm.Token(tok)}, func(r fsm.Result, err error) {
		if err != nil || r.Kind != fsm.Stale {
			t.Errorf("expiry for the old lease: %v %v, want Stale", r.Kind, err)
		}
	})
	log.commit()
	var held bool
	log.Read(func(tb *fsm.Table) { _, held = tb.Holder([]byte("k")) })
	if !held {
		t.Fatal("an expiry made for the lease before the extend freed the extended lock")
	}
}

// Extend is refused while the holder is parked (its expiry is in the log), and after that
// expiry failed and is being retried, although the heap's deadline then lies in the future:
// a lease that ended is never revived.
func TestReplicatedExtendNeverRevivesAnEndedLease(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 2)
	leasesOn(t, log)
	h.clock.Advance(2 * time.Second)
	h.n.Sweep() // the expiry is proposed; the holder is parked
	h.extend(a, 2, "k", tok, 30)
	log.confirmAll(nil)
	want(t, ra.one(t), wire.OpNotHeld, 2)
	log.failAll(outcome.New(outcome.Indeterminate, errors.New("lost")))
	h.extend(a, 3, "k", tok, 30) // the expiry is re-armed a second ahead; the lease is over
	log.confirmAll(nil)
	want(t, ra.one(t), wire.OpNotHeld, 3)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed: an extend of an ended lease went to the log", n)
	}
}

// A new leader restarts an extended lease in full with its extended length, and its expiry
// carries the holder's extension count.
func TestLeadRestartsExtendedLeaseInFull(t *testing.T) {
	h, log := newReplicated(t)
	leasesOn(t, log)
	log.Read(func(tb *fsm.Table) {
		tb.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("k"), Lease: 5})
		tb.ApplyCommand(fsm.Command{Kind: fsm.CmdExtend, Key: []byte("k"), Token: 1, Lease: 60})
	})
	h.n.Lead()
	h.clock.Advance(59 * time.Second)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed: the extended lease ended before its full length after a failover", n)
	}
	h.clock.Advance(time.Second)
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire || cmds[0].Extensions != 1 {
		t.Fatalf("entries %s (%+v): want the expiry for extension count 1 at 60 s", kinds(cmds), cmds)
	}
}

// An extend whose result arrives while the holder's release is in the log leaves the holder
// parked: the release frees it, and nothing expires it in between.
func TestReplicatedExtendThenRelease(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 30)
	leasesOn(t, log)
	h.extend(a, 2, "k", tok, 60)
	h.n.Release(a, 3, []byte("k"), tok)
	if cmds := log.commit(); len(cmds) != 2 || cmds[0].Kind != fsm.CmdExtend || cmds[1].Kind != fsm.CmdRelease {
		t.Fatalf("entries %s, want the extend then the release", kinds(cmds))
	}
	got := ra.take()
	if len(got) != 2 || got[0].Op != wire.OpExtend || got[1].Op != wire.OpRelease {
		t.Fatalf("answers %+v, want L then R", got)
	}
	if s := h.n.Stats(); s.Keys != 0 {
		t.Fatalf("stats %+v: the released key is still in the view", s)
	}
}

// An extend that keeps the stored lease needs no log entry: the leader answers L once raft
// confirmed it still leads, and counts the lease anew from then.
func TestReplicatedExtendOfTheSameLeaseIsConfirmedNotLogged(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 10)
	leasesOn(t, log)
	h.clock.Advance(8 * time.Second)
	h.extend(a, 2, "k", tok, 10)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed for an extend of the same lease", n)
	}
	ra.none(t) // not before the confirmation
	h.clock.Advance(time.Second)
	log.confirmAll(nil) // confirmed at 9 s: the lease runs to 19 s
	want(t, ra.one(t), wire.OpExtend, 2)
	h.clock.Advance(9 * time.Second) // 18 s
	h.n.Sweep()
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed before the lease counted from the confirmation ended", n)
	}
	h.clock.Advance(time.Second) // 19 s
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire || cmds[0].Extensions != 0 {
		t.Fatalf("entries %s (%+v): want the expiry for count 0 (nothing was logged)", kinds(cmds), cmds)
	}
	// Unconfirmed, the answer is E unavailable: the client keeps its deadline.
	h2, log2, b, rb, tok2 := leadingWithHolder(t, 10)
	leasesOn(t, log2)
	h2.extend(b, 3, "k", tok2, 10)
	log2.confirmAll(outcome.New(outcome.NotLeader, errors.New("deposed")))
	if got := want(t, rb.one(t), wire.OpError, 3); got.Reason != wire.ReasonUnavailable {
		t.Fatalf("unconfirmed extend: E %s, want unavailable", got.Reason)
	}
}

// While an extend that changes the lease is in the log, one of the stored lease goes to the
// log too: the stored lease may be about to change under it, and the log keeps them in order.
func TestReplicatedExtendBehindALoggedOneIsLogged(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 30)
	leasesOn(t, log)
	h.extend(a, 2, "k", tok, 5)  // shortens: logged
	h.extend(a, 3, "k", tok, 30) // the stored lease is still 30, but the one before changes it
	cmds := log.commit()
	if len(cmds) != 2 || cmds[0].Lease != 5 || cmds[1].Lease != 30 {
		t.Fatalf("entries %s (%+v): want both extends in the log, in order", kinds(cmds), cmds)
	}
	got := ra.take()
	if len(got) != 2 || got[0].Op != wire.OpExtend || got[1].Op != wire.OpExtend {
		t.Fatalf("answers %+v, want L, L", got)
	}
	// With nothing in the log, an extend of the stored lease (now 30) is confirmed only.
	h.extend(a, 4, "k", tok, 30)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed once no extend was in the log", n)
	}
	log.confirmAll(nil)
	want(t, ra.one(t), wire.OpExtend, 4)
}
