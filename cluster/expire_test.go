package cluster

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// In cluster mode the leader's expiry timer proposes an expiry when its lease ends, so the
// waiter behind a 2 s lease is granted at 2 s, not at a 5 s sweep tick.
func TestClusterWaiterGrantedAtLeaseEnd(t *testing.T) {
	h, log, _, _, tok := leadingWithHolder(t, 2)
	b, rb := h.conn()
	h.acquire(b, 2, "k", 10, 30)
	h.clock.Advance(2*time.Second - time.Millisecond)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed before the lease ended", n)
	}
	h.clock.Advance(time.Millisecond) // no Sweep: the timer alone
	cmds := log.commit()
	if len(cmds) != 2 || cmds[0].Kind != fsm.CmdExpire || cmds[0].Token != fsm.Token(tok) || cmds[1].Kind != fsm.CmdAcquire {
		t.Fatalf("entries at the lease end %s, want the expiry of %d and the waiter's grant", kinds(cmds), tok)
	}
	if got := want(t, rb.one(t), wire.OpAcquire, 2); got.Token <= tok {
		t.Fatalf("waiter token %d not above %d", got.Token, tok)
	}
}

// The timer follows the earliest deadline: an earlier grant moves it earlier, a later one
// costs no timer, and after it fires it is set for the next deadline.
func TestExpiryTimerRearmedForEarlierLease(t *testing.T) {
	h, log := leadingReplicated(t)
	start := h.clock.Now()
	c, r := h.conn()
	at := func(d time.Duration) bool { return h.clock.HasTimerAt(start.Add(d)) }
	h.acquire(c, 1, "slow", 0, 30)
	log.commit()
	if !at(30 * time.Second) {
		t.Fatal("no timer at the only lease's end")
	}
	h.acquire(c, 2, "fast", 0, 2)
	log.commit()
	if !at(2*time.Second) || at(30*time.Second) {
		t.Fatalf("after an earlier grant: timer at 2 s %v (want true), at 30 s %v (want false)", at(2*time.Second), at(30*time.Second))
	}
	h.acquire(c, 3, "mid", 0, 10)
	log.commit()
	if at(10 * time.Second) {
		t.Fatal("a grant behind the earliest deadline armed a timer of its own")
	}
	r.take()
	h.clock.Advance(2 * time.Second)
	if cmds := log.commit(); len(cmds) != 1 || string(cmds[0].Key) != "fast" || cmds[0].Kind != fsm.CmdExpire {
		t.Fatalf("entries at 2 s %s, want fast's expiry", kinds(cmds))
	}
	if !at(10 * time.Second) {
		t.Fatal("after firing, the timer is not set for the next deadline (mid, 10 s)")
	}
	h.clock.Advance(8 * time.Second)
	if cmds := log.commit(); len(cmds) != 1 || string(cmds[0].Key) != "mid" {
		t.Fatalf("entries at 10 s %s, want mid's expiry", kinds(cmds))
	}
}

// A follower times no lease: Follow stops the timer, and Lead sets it for the rebuilt view.
func TestNoExpiryTimerWhileFollowing(t *testing.T) {
	h, log := newReplicated(t)
	log.Read(func(t *fsm.Table) { t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("k"), Lease: 2}) })
	start := h.clock.Now()
	h.clock.Advance(10 * time.Second)
	if log.pending() != 0 || h.clock.HasTimerAt(start.Add(2*time.Second)) {
		t.Fatal("a node that never led timed a lease")
	}
	h.n.Lead()
	if !h.clock.HasTimerAt(start.Add(12 * time.Second)) {
		t.Fatal("Lead set no timer for the rebuilt view's lease")
	}
	h.n.Follow()
	if h.clock.HasTimerAt(start.Add(12 * time.Second)) {
		t.Fatal("the timer is still set after Follow")
	}
	h.clock.Advance(time.Minute)
	if n := log.pending(); n != 0 {
		t.Fatalf("a follower proposed %d expiries", n)
	}
}

// laneLog is a group proposer with raftnode's bounded queue: beyond maxQueue commands
// proposed and not answered it refuses (outcome.Unavailable), and it counts refusals. It records
// the most expiries it held at once and the largest group.
type laneLog struct {
	*fakeLog
	maxQueue int
	mu       sync.Mutex
	expiries int // proposed, not answered
	peak     int
	bigGroup int
	refused  []fsm.CommandKind
}

func (l *laneLog) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	l.SubmitGroup(fsm.Proposal{Cmd: cmd, Done: done})
}

func (l *laneLog) SubmitGroup(ps ...fsm.Proposal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bigGroup = max(l.bigGroup, len(ps))
	if l.fakeLog.pending()+len(ps) > l.maxQueue {
		for _, p := range ps {
			l.refused = append(l.refused, p.Cmd.Kind)
			go p.Done(fsm.Result{}, fmt.Errorf("%w: queue full", outcome.Unavailable))
		}
		return
	}
	for _, p := range ps {
		done := p.Done
		if p.Cmd.Kind == fsm.CmdExpire {
			l.expiries++
			l.peak = max(l.peak, l.expiries)
			done = func(r fsm.Result, err error) {
				l.mu.Lock()
				l.expiries--
				l.mu.Unlock()
				p.Done(r, err)
			}
		}
		l.fakeLog.Submit(p.Cmd, done)
	}
}

// A million leases end together: the lane never has more expiries out than its bound, in
// groups no larger than its group size, and a release submitted meanwhile is accepted and
// applied (R), never refused for a full queue.
func TestExpiryLaneBoundedUnderMillionDue(t *testing.T) {
	const keys, inFlight = 1_000_000, DefaultExpiryInFlight
	log := &laneLog{fakeLog: newFakeLog(t), maxQueue: 16384}
	h := newHarness(t, func(c *Config) {
		c.MaxKeys = 2 * keys
		c.Replicated = &Replicated{Propose: log, State: log, Confirm: log}
	})
	log.Read(func(t *fsm.Table) {
		for i := range keys {
			t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("k" + strconv.Itoa(i)), Lease: 30})
		}
		t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("mine"), Lease: 60})
	})
	h.n.Lead()
	h.clock.Advance(30 * time.Second) // every k... lease ends at once; the timer fires
	if p := log.pending(); p != inFlight {
		t.Fatalf("%d expiries proposed when %d fell due, want the lane's bound %d", p, keys, inFlight)
	}
	c, r := h.conn()
	h.n.Release(c, 1, []byte("mine"), keys+1)
	// Each commit answers what is out; the lane refills behind the results, to its bound.
	freed := 0
	for round := range 8 {
		for _, cmd := range log.commit() {
			if cmd.Kind == fsm.CmdExpire {
				freed++
			}
		}
		if p := log.pending(); p != inFlight {
			t.Fatalf("round %d: %d expiries out after the results came back, want the lane refilled to %d", round, p, inFlight)
		}
	}
	want(t, r.one(t), wire.OpRelease, 1)
	log.mu.Lock()
	peak, big, refused := log.peak, log.bigGroup, log.refused
	log.mu.Unlock()
	if len(refused) != 0 {
		t.Fatalf("%d commands refused for a full queue, first kind %d", len(refused), refused[0])
	}
	if peak > inFlight {
		t.Fatalf("%d expiries in flight at once, over the lane's bound %d", peak, inFlight)
	}
	if big > DefaultExpiryGroup {
		t.Fatalf("a group of %d commands, over %d", big, DefaultExpiryGroup)
	}
	if s := h.n.Stats(); freed != 8*inFlight || s.Keys != keys-freed {
		t.Fatalf("%d freed, %d keys left of %d", freed, s.Keys, keys)
	}
}

// leadingOnLane is a leading node on a laneLog that never refuses for a full queue, whose
// expiry lane has at most inFlight expiries out, in groups of at most group commands.
func leadingOnLane(t *testing.T, inFlight, group int) (*harness, *laneLog) {
	t.Helper()
	log := &laneLog{fakeLog: newFakeLog(t), maxQueue: 1 << 20}
	h := newHarness(t, func(c *Config) {
		c.Replicated = &Replicated{Propose: log, State: log, Confirm: log, ExpiryInFlight: inFlight, ExpiryGroup: group}
	})
	h.n.Lead()
	return h, log
}

// With a lane smaller than a group, expiries still go on as results come back, never more
// than the bound out at once, until every due lease is freed; the grant behind an expiry
// shares its group.
func TestExpiryLaneSmallBound(t *testing.T) {
	h, log := leadingOnLane(t, 3, 4)
	a, ra := h.conn()
	for i := range 10 {
		h.acquire(a, uint64(i+1), "k"+strconv.Itoa(i), 0, 2)
	}
	log.commit()
	ra.take()
	w, rw := h.conn()
	h.acquire(w, 100, "k0", 30, 30)
	h.clock.Advance(2 * time.Second)
	for round := 0; round < 10 && h.n.Stats().Keys > 1; round++ {
		if p := log.pending(); p == 0 || p > 3+1 { // three expiries, and k0's grant
			t.Fatalf("round %d: %d commands out, want 1..4", round, p)
		}
		log.commit()
	}
	log.mu.Lock()
	peak, big := log.peak, log.bigGroup
	log.mu.Unlock()
	if s := h.n.Stats(); s.Keys != 1 || peak != 3 || big > 4 {
		t.Fatalf("keys %d (want k0's new holder only), peak %d expiries out (want 3), largest group %d (at most 4)", s.Keys, peak, big)
	}
	want(t, rw.one(t), wire.OpAcquire, 100)
}

// An acquire of a key whose lease is over, while the lane has not reached that key yet (it is
// full), goes into one group right behind the key's expiry and is granted, wait 0 or not:
// the lock was free when it arrived, so neither T nor a wait is the right answer. The same
// when the key's queue holds only waiters that have timed out: nobody waits.
func TestAcquireBehindALazyExpiryIsGranted(t *testing.T) {
	for _, timedOut := range []bool{false, true} {
		t.Run(fmt.Sprintf("timed-out waiters %v", timedOut), func(t *testing.T) {
			h, log := leadingOnLane(t, 1, 2)
			a, ra := h.conn()
			h.acquire(a, 1, "k0", 0, 2)
			h.acquire(a, 2, "k1", 0, 2)
			log.commit()
			ra.take()
			if timedOut {
				w, rw := h.conn()
				h.acquire(w, 10, "k0", 1, 30)
				h.acquire(w, 11, "k1", 1, 30)
				h.clock.Advance(time.Second) // both waits over: T, once leadership is confirmed
				log.confirmAll(nil)
				for _, r := range rw.take() {
					if r.Op != wire.OpTimeout {
						t.Fatalf("waiter answered %+v at its deadline, want T", r)
					}
				}
				h.clock.Advance(time.Second)
			} else {
				h.clock.Advance(2 * time.Second)
			}
			late := notInLane(t, h, "k0", "k1") // both leases over; the lane took one
			b, rb := h.conn()
			h.acquire(b, 3, late, 0, 30)
			if n := log.confirmAll(nil); n != 0 { // a T from the view would be sent now
				t.Fatalf("%d confirmations: a grant needs none", n)
			}
			cmds := log.commit()
			if len(cmds) != 3 || cmds[1].Kind != fsm.CmdExpire || cmds[2].Kind != fsm.CmdAcquire || string(cmds[2].Key) != late || log.bigGroup != 2 {
				t.Fatalf("entries %s (largest group %d): want the lane's expiry, then %s's expiry with the acquire behind it in one group", kinds(cmds), log.bigGroup, late)
			}
			want(t, rb.one(t), wire.OpAcquire, 3)
			if n := log.confirmAll(nil); n != 0 {
				t.Fatalf("%d confirmations: a grant needs none", n)
			}
		})
	}
}

// notInLane returns the one of keys a and b whose expiry the lane (of one) has not taken.
func notInLane(t *testing.T, h *harness, a, b string) string {
	t.Helper()
	late := a
	if e, _ := h.n.view.held.Lookup(late); e.Parked() {
		late = b
	}
	if e, _ := h.n.view.held.Lookup(late); e.Parked() {
		t.Fatal("the lane of one expiry took both")
	}
	return late
}
