package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// fakeLog is a Proposer and StateReader for exact tests of cluster mode: Submit queues, and
// the test decides when the queued commands are applied (in order, to a real fsm.Table) and
// their results delivered, or fails them.
type fakeLog struct {
	mu      sync.Mutex
	table   *fsm.Table
	queued  []proposal
	applied []fsm.Command
	// Leadership confirmations wait for confirmAll, so the test decides their outcome.
	confirms []func(error)
}

type proposal struct {
	cmd  fsm.Command
	done func(fsm.Result, error)
}

func newFakeLog(t *testing.T) *fakeLog {
	tb, err := fsm.NewTable(0)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeLog{table: tb}
}

func (l *fakeLog) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queued = append(l.queued, proposal{cmd, done})
}

func (l *fakeLog) Confirm(done func(error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirms = append(l.confirms, done)
}

// confirmAll answers every held confirmation with err.
func (l *fakeLog) confirmAll(err error) int {
	l.mu.Lock()
	cs := l.confirms
	l.confirms = nil
	l.mu.Unlock()
	for _, done := range cs {
		done(err)
	}
	return len(cs)
}

func (l *fakeLog) Read(fn func(*fsm.Table)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn(l.table)
}

func (l *fakeLog) take() []proposal {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.queued
	l.queued = nil
	return p
}

// commit applies everything queued so far and delivers the results in order.
func (l *fakeLog) commit() []fsm.Command {
	var cmds []fsm.Command
	for _, p := range l.take() {
		l.mu.Lock()
		r := l.table.ApplyCommand(p.cmd)
		l.applied = append(l.applied, p.cmd)
		l.mu.Unlock()
		cmds = append(cmds, p.cmd)
		p.done(r, nil)
	}
	return cmds
}

// failAll answers everything queued with err, applying nothing.
func (l *fakeLog) failAll(err error) {
	for _, p := range l.take() {
		p.done(fsm.Result{}, err)
	}
}

func (l *fakeLog) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queued)
}

func newReplicated(t *testing.T) (*harness, *fakeLog) {
	t.Helper()
	log := newFakeLog(t)
	h := newHarness(t, func(c *Config) { c.Replicated = &Replicated{Propose: log, State: log, Confirm: log} })
	return h, log
}

// leadingReplicated is newReplicated, leading.
func leadingReplicated(t *testing.T) (*harness, *fakeLog) {
	t.Helper()
	h, log := newReplicated(t)
	h.n.Lead()
	return h, log
}

// leadingWithHolder is newReplicated leading, with a's acquire of "k" for lease seconds
// granted and answered: it returns a, what a received from then on, and the token.
func leadingWithHolder(t *testing.T, lease uint16) (*harness, *fakeLog, *Session, *recorder, uint64) {
	t.Helper()
	h, log := leadingReplicated(t)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, lease)
	log.commit()
	return h, log, a, ra, want(t, ra.one(t), wire.OpAcquire, 1).Token
}

func kinds(cmds []fsm.Command) string {
	s := ""
	for _, c := range cmds {
		s += fmt.Sprintf("%d:%s ", c.Kind, c.Key)
	}
	return s
}

func TestFollowerRefusesUntilLead(t *testing.T) {
	h, log := newReplicated(t)
	c, r := h.conn()
	h.acquire(c, 1, "k", 0, 30)
	if got := r.one(t); got.Op != wire.OpError || got.Reason != wire.ReasonUnavailable {
		t.Fatalf("acquire on a follower: %+v", got)
	}
	h.n.Release(c, 2, []byte("k"), 1)
	if got := r.one(t); got.Reason != wire.ReasonUnavailable {
		t.Fatalf("release on a follower: %+v", got)
	}
	if log.pending() != 0 {
		t.Fatal("a follower proposed something")
	}
}

func TestReplicatedGrantAndHandoffInOneCommit(t *testing.T) {
	h, log := leadingReplicated(t)
	a, ra := h.conn()
	b, rb := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	ra.none(t) // nothing is answered before the entry is applied
	log.commit()
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token

	h.acquire(b, 2, "k", 60, 30) // held in the view: queued without an entry
	h.acquire(a, 3, "k", 0, 30)  // wait 0 on a held key: T, no entry
	ra.none(t)                   // not before raft confirmed this node still leads
	if n := log.confirmAll(nil); n != 1 {
		t.Fatalf("%d leadership confirmations for one T from the view, want 1", n)
	}
	want(t, ra.one(t), wire.OpTimeout, 3)
	if log.pending() != 0 {
		t.Fatalf("%d entries proposed for decisions that change nothing", log.pending())
	}
	h.n.Release(a, 4, []byte("k"), tok)
	cmds := log.commit() // the release and the waiter's acquire go together
	if len(cmds) != 2 || cmds[0].Kind != fsm.CmdRelease || cmds[1].Kind != fsm.CmdAcquire {
		t.Fatalf("hand-off entries: %s", kinds(cmds))
	}
	want(t, ra.one(t), wire.OpRelease, 4)
	if got := want(t, rb.one(t), wire.OpAcquire, 2); got.Token <= tok {
		t.Fatalf("waiter token %d not above %d", got.Token, tok)
	}
	if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 || s.Keys != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestReplicatedRaceOnAFreeKey(t *testing.T) {
	h, log := leadingReplicated(t)
	a, ra := h.conn()
	b, rb := h.conn()
	c, rc := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	h.acquire(b, 2, "k", 0, 30)  // the view still shows k free: proposed too
	h.acquire(c, 3, "k", 60, 30) // likewise, and it may wait
	log.commit()
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	want(t, rb.one(t), wire.OpTimeout, 2) // held when applied, wait 0
	rc.none(t)                            // held when applied: queued
	if s := h.n.Stats(); s.Waiters != 1 {
		t.Fatalf("stats %+v", s)
	}
	h.n.Release(a, 4, []byte("k"), tok)
	log.commit()
	want(t, ra.one(t), wire.OpRelease, 4)
	want(t, rc.one(t), wire.OpAcquire, 3)
}

func TestReplicatedOutcomes(t *testing.T) {
	h, log := leadingReplicated(t)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	log.failAll(outcome.Unavailable)
	if got := ra.one(t); got.Reason != wire.ReasonUnavailable {
		t.Fatalf("not applied: %+v", got)
	}
	h.acquire(a, 2, "k", 0, 30)
	log.failAll(outcome.Indeterminate)
	if got := ra.one(t); got.Reason != wire.ReasonIndeterminate {
		t.Fatalf("maybe applied: %+v", got)
	}
	if s := h.n.Stats(); s.Pending != 0 {
		t.Fatalf("pending %d after failed proposals", s.Pending)
	}
}

func TestReplicatedViewHealsAMissedGrant(t *testing.T) {
	h, log := leadingReplicated(t)
	// A grant applied behind the view's back (its result was lost as maybe-applied).
	log.Read(func(t *fsm.Table) { t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("k"), Lease: 5}) })
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	log.commit()
	want(t, ra.one(t), wire.OpTimeout, 1)
	// The view adopted the holder with its lease restarted in full: it expires, never earlier.
	h.clock.Advance(4 * time.Second)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed before the adopted lease ended", n)
	}
	h.clock.Advance(time.Second) // the leader's expiry timer proposes it at the lease end
	if n := log.pending(); n != 1 {
		t.Fatalf("%d proposed at the adopted lease end, want its expiry", n)
	}
	cmds := log.commit()
	if len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire {
		t.Fatalf("expiry entries: %s", kinds(cmds))
	}
	h.acquire(a, 2, "k", 0, 30)
	log.commit()
	want(t, ra.one(t), wire.OpAcquire, 2)
}

func TestReplicatedExpiryHandsOffAndRacesRelease(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 2)
	b, rb := h.conn()
	h.acquire(b, 2, "k", 60, 30)
	h.clock.Advance(2 * time.Second)
	h.n.Sweep()                         // proposes expire k tok, and b's acquire behind it
	h.n.Release(a, 3, []byte("k"), tok) // the holder's release races the expiry
	cmds := log.commit()
	if len(cmds) != 2 || cmds[0].Kind != fsm.CmdExpire || cmds[1].Kind != fsm.CmdAcquire {
		t.Fatalf("entries %s: a release of a key being freed must not be proposed again", kinds(cmds))
	}
	log.confirmAll(nil)
	want(t, ra.one(t), wire.OpNotHeld, 3) // the lease ran out first
	want(t, rb.one(t), wire.OpAcquire, 2)
}

func TestLeadRestartsLeasesInFull(t *testing.T) {
	h, log := newReplicated(t)
	log.Read(func(t *fsm.Table) {
		t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("a"), Lease: 10})
		t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("b"), Lease: 20})
	})
	h.clock.Advance(time.Hour) // however long ago they were granted
	h.n.Lead()
	if s := h.n.Stats(); s.Keys != 2 || s.LastToken != 2 || !s.Leading {
		t.Fatalf("stats after Lead %+v", s)
	}
	h.clock.Advance(9 * time.Second)
	if n := log.pending(); n != 0 {
		t.Fatalf("%d proposed: a lease ended before its full length after the failover", n)
	}
	h.clock.Advance(time.Second) // the expiry timer, armed by Lead, fires at a's full lease
	if cmds := log.commit(); len(cmds) != 1 || cmds[0].Kind != fsm.CmdExpire || string(cmds[0].Key) != "a" {
		t.Fatalf("entries at a's full lease %s, want a's expiry", kinds(cmds))
	}
	c, r := h.conn()
	h.acquire(c, 1, "b", 0, 30)
	log.confirmAll(nil)
	want(t, r.one(t), wire.OpTimeout, 1)
}

func TestFollowAnswersUnproposedWaitersAndSettlesProposedOnes(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 30)
	b, rb := h.conn()
	c, rc := h.conn()
	h.acquire(b, 2, "k", 60, 30)
	h.acquire(c, 3, "k", 60, 30)
	h.n.Release(a, 4, []byte("k"), tok) // b's acquire is proposed behind the release
	h.n.Follow()
	if got := rc.one(t); got.Op != wire.OpError || got.Owner != 3 || got.Reason != wire.ReasonUnavailable {
		t.Fatalf("unproposed waiter on step-down: %+v", got)
	}
	rb.none(t) // proposed: its entry decides
	log.failAll(outcome.Indeterminate)
	if got := rb.one(t); got.Reason != wire.ReasonIndeterminate {
		t.Fatalf("proposed waiter after step-down: %+v", got)
	}
	if got := ra.one(t); got.Reason != wire.ReasonIndeterminate {
		t.Fatalf("release in flight at step-down: %+v", got)
	}
	if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 || s.Leading {
		t.Fatalf("stats %+v", s)
	}
}

func TestGrantToAClosedConnectionIsReleased(t *testing.T) {
	h, log, a, _, tok := leadingWithHolder(t, 30)
	b, rb := h.conn()
	h.acquire(b, 2, "k", 60, 30)
	h.n.Release(a, 3, []byte("k"), tok) // b's acquire is proposed
	h.n.Detach(b)                       // b goes away before the entry is applied
	log.commit()
	rb.none(t)
	cmds := log.commit() // the node gives b's grant back at once
	if len(cmds) != 1 || cmds[0].Kind != fsm.CmdRelease {
		t.Fatalf("compensation entries: %s", kinds(cmds))
	}
	if s := h.n.Stats(); s.Keys != 0 || s.Waiters != 0 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFollowerStatsComeFromTheReplicatedTable(t *testing.T) {
	h, log := newReplicated(t)
	log.Read(func(t *fsm.Table) {
		t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("a"), Lease: 10})
		t.ApplyCommand(fsm.Command{Kind: fsm.CmdAcquire, Key: []byte("b"), Lease: 10})
	})
	if s := h.n.Stats(); s.Keys != 2 || s.LastToken != 2 || s.Leading {
		t.Fatalf("follower stats %+v: want the replicated table's 2 keys and last token 2", s)
	}
}

// groupLog is a fakeLog that also proposes groups, recording their sizes.
type groupLog struct {
	*fakeLog
	groups []int
}

func (g *groupLog) SubmitGroup(ps ...fsm.Proposal) {
	g.groups = append(g.groups, len(ps))
	for _, p := range ps {
		g.Submit(p.Cmd, p.Done)
	}
}

func TestHandoffIsOneGroup(t *testing.T) {
	log := &groupLog{fakeLog: newFakeLog(t)}
	h := newHarness(t, func(c *Config) { c.Replicated = &Replicated{Propose: log, State: log, Confirm: log} })
	h.n.Lead()
	a, ra := h.conn()
	b, rb := h.conn()
	h.acquire(a, 1, "k", 0, 2)
	log.commit()
	tok := ra.one(t).Token
	h.acquire(b, 2, "k", 60, 30)
	h.n.Release(a, 3, []byte("k"), tok)
	if len(log.groups) != 1 || log.groups[0] != 2 {
		t.Fatalf("groups %v: the release and the waiter's grant must be one group of two", log.groups)
	}
	log.commit()
	want(t, ra.one(t), wire.OpRelease, 3)
	tok2 := want(t, rb.one(t), wire.OpAcquire, 2).Token
	// An expiry with a waiter behind it is one group too.
	c, rc := h.conn()
	h.acquire(c, 4, "k", 60, 30)
	h.clock.Advance(31 * time.Second)
	h.n.Sweep()
	if len(log.groups) != 2 || log.groups[1] != 2 {
		t.Fatalf("groups %v: the expiry and the next grant must be one group of two", log.groups)
	}
	log.commit()
	if got := want(t, rc.one(t), wire.OpAcquire, 4); got.Token <= tok2 {
		t.Fatalf("token %d after %d", got.Token, tok2)
	}
	// A release without waiters is a single submission.
	h.n.Release(c, 5, []byte("k"), tok2+1)
	if len(log.groups) != 2 {
		t.Fatalf("groups %v: a lone release is not a group", log.groups)
	}
}

// TestWaiterBackAtTheHeadStillTimesOut: a waiter whose hand-off acquire finds the key held
// goes back to the head of the queue and still gets its T at its deadline (its timer was
// still armed); and one whose deadline passed while its acquire was in the log (the timer's
// firing was ignored then) gets T as soon as the result arrives.
func TestWaiterBackAtTheHeadStillTimesOut(t *testing.T) {
	for _, late := range []bool{false, true} {
		h, log, a, _, tok := leadingWithHolder(t, 60)
		b, rb := h.conn()
		h.acquire(b, 2, "k", 5, 30) // waits at most 5 s
		h.n.Release(a, 3, []byte("k"), tok)
		queued := log.take()
		if len(queued) != 2 || queued[1].cmd.Kind != fsm.CmdAcquire {
			t.Fatalf("want the release and b's acquire proposed, got %d", len(queued))
		}
		queued[0].done(fsm.Result{}, outcome.Unavailable) // the release did not happen
		if late {
			h.clock.Advance(6 * time.Second) // b's deadline passes while its acquire is in the log
			rb.none(t)
		} else {
			h.clock.Advance(3 * time.Second)
		}
		queued[1].done(fsm.Result{Kind: fsm.Held, Holder: fsm.Holder{Token: fsm.Token(tok), Lease: 60}}, nil)
		if !late {
			rb.none(t) // back at the head, 2 s of its wait left
			h.clock.Advance(2 * time.Second)
			rb.none(t) // the timer's T is read from the view: sent once leadership is confirmed
			log.confirmAll(nil)
		}
		if got := rb.one(t); got.Op != wire.OpTimeout || got.Owner != 2 {
			t.Fatalf("late=%v: waiter after its wait: %+v, want T", late, got)
		}
		if s := h.n.Stats(); s.Waiters != 0 || s.Pending != 0 {
			t.Fatalf("late=%v: stats %+v", late, s)
		}
	}
}
