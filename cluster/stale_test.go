package cluster

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/wire"
)

// errDeposedForTest is what a Confirmer reports once this node has learned of a newer leader.
var errDeposedForTest = outcome.New(outcome.NotLeader, errEpochChanged)

// TestAnswersFromTheViewWaitForLeadership: every answer a leader reads from its view (a
// release's N for a token it does not hold, for a lease it counts as over, an acquire's T
// with wait 0, a waiter's T at its deadline) is sent only once leadership is confirmed, and
// becomes E unavailable when it is not, or when the node stopped leading meanwhile. This is
// the paused leader's case: its view says the lease is over, but a newer leader restarted it.
func TestAnswersFromTheViewWaitForLeadership(t *testing.T) {
	type setup struct {
		name string
		// ask sends the request whose answer comes from the view; its client is c.
		ask func(h *harness, log *fakeLog, tok uint64, c *Session)
		// answer is what a confirmed leader sends.
		answer wire.Op
	}
	cases := []setup{
		{"release of a token that never held", func(h *harness, _ *fakeLog, tok uint64, c *Session) {
			h.n.Release(c, 9, []byte("k"), tok+7)
		}, wire.OpNotHeld},
		{"release of a lease the view counts as over", func(h *harness, _ *fakeLog, tok uint64, c *Session) {
			h.clock.Advance(31 * time.Second)
			h.n.Release(c, 9, []byte("k"), tok)
		}, wire.OpNotHeld},
		{"acquire with wait 0 of a held key", func(h *harness, _ *fakeLog, _ uint64, c *Session) {
			h.acquire(c, 9, "k", 0, 30)
		}, wire.OpTimeout},
		{"waiter at its deadline", func(h *harness, _ *fakeLog, _ uint64, c *Session) {
			h.acquire(c, 9, "k", 2, 30)
			h.clock.Advance(2 * time.Second)
		}, wire.OpTimeout},
	}
	for _, tc := range cases {
		for _, outcome := range []string{"confirmed", "not confirmed", "deposed meanwhile"} {
			t.Run(tc.name+"/"+outcome, func(t *testing.T) {
				h, log, _, _, tok := leadingWithHolder(t, 30)
				b, rb := h.conn()
				tc.ask(h, log, tok, b)
				log.commit() // an expiry the view proposed, if any, is applied: the answer still waits
				rb.none(t)   // nothing before the confirmation
				switch outcome {
				case "confirmed":
					log.confirmAll(nil)
					want(t, rb.one(t), tc.answer, 9)
					return
				case "not confirmed":
					log.confirmAll(errDeposedForTest)
				case "deposed meanwhile":
					h.n.Follow()
					log.confirmAll(nil) // raft confirmed a leadership the node no longer decides in
				}
				got := rb.one(t)
				if got.Op != wire.OpError || got.Reason != wire.ReasonUnavailable || got.Owner != 9 {
					t.Fatalf("answer %+v, want E unavailable: a view that may be stale never answers %s", got, tc.answer)
				}
			})
		}
	}
}

// TestAnswersFromTheLogNeedNoConfirmation: a release's R and N and an acquire's T that an
// entry of this epoch decided go out when the entry's result arrives, with no confirmation
// round: the commit itself proved the leadership.
func TestAnswersFromTheLogNeedNoConfirmation(t *testing.T) {
	h, log, a, ra, tok := leadingWithHolder(t, 30)
	h.n.Release(a, 2, []byte("k"), tok)
	log.commit()
	want(t, ra.one(t), wire.OpRelease, 2)
	if n := log.confirmAll(nil); n != 0 {
		t.Fatalf("%d confirmations for answers the log gave", n)
	}
}

// TestSingleModeAnswersAtOnce: single mode has no other leader, so N and T need no round.
func TestSingleModeAnswersAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	h.n.Release(a, 2, []byte("k"), tok+1)
	want(t, ra.one(t), wire.OpNotHeld, 2)
	h.acquire(a, 3, "k", 0, 30)
	want(t, ra.one(t), wire.OpTimeout, 3)
}
