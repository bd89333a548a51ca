package forward_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Acquire, release and ping through a follower: the leader decides and issues the tokens,
// the follower's own table is never touched, and pings are answered by the follower.
func TestThroughFollower(t *testing.T) {
	p := startPair(t)
	c := p.follower.dial(t)
	t1 := c.Do(t, wiretest.Acquire(1, 0, 60, "k"))
	if t1.Op != wire.OpAcquire || t1.Owner != 1 || t1.Token == 0 {
		t.Fatalf("acquire through the follower: %s, want A for owner 1", wiretest.Describe(t1))
	}
	if st := p.leader.node.Stats(); st.LastToken != t1.Token || st.Keys != 1 {
		t.Fatalf("leader stats %+v, want key k held with token %d", st, t1.Token)
	}
	c.Send(t, wiretest.Acquire(2, 0, 60, "k"))
	c.ExpectOp(t, wire.OpTimeout, 2)
	c.Send(t, wiretest.Release(3, t1.Token+100, "k"))
	c.ExpectOp(t, wire.OpNotHeld, 3)
	c.Send(t, wiretest.Release(4, t1.Token, "k"))
	c.ExpectOp(t, wire.OpRelease, 4)
	c.Send(t, wiretest.Release(5, t1.Token, "k"))
	c.ExpectOp(t, wire.OpNotHeld, 5)
	c.Alive(t, 6)

	// Tokens strictly increase over grants made through the follower and on the leader.
	t2 := c.Grant(t, 7, 0, 60, "k")
	lc := p.leader.dial(t)
	t3 := lc.Grant(t, 8, 0, 60, "j")
	t4 := c.Grant(t, 9, 0, 60, "m")
	if !(t1.Token < t2 && t2 < t3 && t3 < t4) {
		t.Fatalf("tokens %d, %d, %d, %d: want strictly increasing", t1.Token, t2, t3, t4)
	}

	// Frames the follower refuses itself never reach the link.
	c.Send(t, wiretest.Acquire(0, 0, 60, "k"))
	c.ExpectError(t, 0, wire.ReasonBadOwner)
	c.Send(t, wiretest.Acquire(10, 0, 0, "k"))
	c.ExpectError(t, 10, wire.ReasonBadRange)
	c.Send(t, wiretest.Release(11, 1, "a b"))
	c.ExpectError(t, 11, wire.ReasonBadKey)
	c.Alive(t, 12)
	idle(t, p.link)
	p.follower.untouched(t)
	if st := p.leader.node.Stats(); st.Keys != 3 || st.LastToken != t4 {
		t.Fatalf("leader stats %+v, want k, j and m held and last token %d", st, t4)
	}
}

// One FIFO per key on the leader, whichever node a waiter's client is connected to.
func TestFIFOAcrossFollowerAndLeader(t *testing.T) {
	p := startPair(t)
	holder := p.leader.dial(t)
	f1, f3 := p.follower.dial(t), p.follower.dial(t)
	l2 := p.leader.dial(t)
	tok := holder.Grant(t, 1, 0, 60, "k")

	p.leader.queue(t, f1, 10, "k", 1)
	p.leader.queue(t, l2, 20, "k", 2)
	p.leader.queue(t, f3, 30, "k", 3)
	p.leader.queue(t, f1, 11, "k", 4)

	order := []struct {
		c     *wiretest.Conn
		owner uint64
	}{{f1, 10}, {l2, 20}, {f3, 30}, {f1, 11}}
	holder.Send(t, wiretest.Release(2, tok, "k"))
	holder.ExpectOp(t, wire.OpRelease, 2)
	for i, w := range order {
		next := w.c.ExpectGrant(t, w.owner)
		if next <= tok {
			t.Fatalf("waiter %d granted token %d after %d: tokens must increase", w.owner, next, tok)
		}
		tok = next
		for _, other := range order[i+1:] {
			if other.c != w.c {
				other.c.ExpectSilent(t, 20*time.Millisecond)
			}
		}
		w.c.Send(t, wiretest.Release(100+w.owner, tok, "k"))
		w.c.ExpectOp(t, wire.OpRelease, 100+w.owner)
	}
	idle(t, p.link)
	p.follower.untouched(t)
}

// Two clients of the follower using the same owner values at the same time each get their
// own answers: the link's owners are its own.
func TestSameOwnersOnTwoClients(t *testing.T) {
	p := startPair(t)
	a, b := p.follower.dial(t), p.follower.dial(t)
	holder := p.leader.dial(t)
	htok := holder.Grant(t, 1, 0, 60, "w")

	// a's owner 7 waits on w; b's owner 7 is granted x at once; a hears nothing of it.
	p.leader.queue(t, a, 7, "w", 1)
	btok := b.Grant(t, 7, 0, 60, "x")
	a.ExpectSilent(t, 50*time.Millisecond)
	holder.Send(t, wiretest.Release(2, htok, "w"))
	atok := a.ExpectGrant(t, 7)
	b.ExpectSilent(t, 50*time.Millisecond)
	if atok <= btok {
		t.Fatalf("a granted %d after b's %d: tokens must increase", atok, btok)
	}

	// Both pipeline the same owners 1..n at once, on keys of their own.
	const n = 300
	errs := make(chan error, 2)
	run := func(c *wiretest.Conn, name string) {
		frames := make([][]byte, 0, n)
		for i := uint64(1); i <= n; i++ {
			frames = append(frames, wiretest.Acquire(i, 0, 60, fmt.Sprintf("%s/%d", name, i)))
		}
		if err := c.Write(wiretest.Concat(frames...), wiretest.WriteTimeout); err != nil {
			errs <- err
			return
		}
		seen := map[uint64]bool{}
		for range n {
			r, err := c.TryNext(wiretest.ReadTimeout)
			switch {
			case err != nil:
				errs <- err
				return
			case r.Op != wire.OpAcquire || r.Owner < 1 || r.Owner > n || seen[r.Owner]:
				errs <- fmt.Errorf("%s got %s", name, wiretest.Describe(r))
				return
			}
			seen[r.Owner] = true
		}
		errs <- nil
	}
	go run(a, "a")
	go run(b, "b")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	a.ExpectSilent(t, 50*time.Millisecond)
	b.ExpectSilent(t, 50*time.Millisecond)
	idle(t, p.link)
}

// Thousands of pipelined requests from several clients through the follower, reusing the same
// owners on every client: each answered exactly once, with its owner and the right answer.
func TestPipelinedThroughFollower(t *testing.T) {
	p := startPair(t)
	const clients, keys = 4, 1000
	errs := make(chan error, clients)
	for ci := range clients {
		c := p.follower.dial(t)
		go func() { errs <- pipeline(c, ci, keys) }()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	idle(t, p.link)
	p.follower.untouched(t)
	if st := p.leader.node.Stats(); st.LastToken != clients*keys || st.Keys != 0 {
		t.Fatalf("leader stats %+v, want %d tokens issued and every key released", st, clients*keys)
	}
}

// pipeline grants keys keys in one write, then sends for each key in a second write an
// acquire (T: held), a release of its token (R) and the same release again (N).
func pipeline(c *wiretest.Conn, ci, keys int) error {
	key := func(i int) string { return fmt.Sprintf("c%d/%d", ci, i) }
	frames := make([][]byte, 0, 3*keys)
	for i := range keys {
		frames = append(frames, wiretest.Acquire(uint64(i+1), 0, 60, key(i)))
	}
	if err := c.Write(wiretest.Concat(frames...), wiretest.WriteTimeout); err != nil {
		return err
	}
	tokens := make([]uint64, keys)
	for range keys {
		r, err := c.TryNext(wiretest.ReadTimeout)
		if err != nil {
			return err
		}
		i := int(r.Owner) - 1
		if r.Op != wire.OpAcquire || i < 0 || i >= keys || tokens[i] != 0 || r.Token == 0 {
			return fmt.Errorf("client %d: got %s in the grant round", ci, wiretest.Describe(r))
		}
		tokens[i] = r.Token
	}
	frames = frames[:0]
	want := map[uint64]wire.Op{}
	for i := range keys {
		o := uint64(keys + 3*i + 1)
		frames = append(frames,
			wiretest.Acquire(o, 0, 60, key(i)),
			wiretest.Release(o+1, tokens[i], key(i)),
			wiretest.Release(o+2, tokens[i], key(i)))
		want[o], want[o+1], want[o+2] = wire.OpTimeout, wire.OpRelease, wire.OpNotHeld
	}
	if err := c.Write(wiretest.Concat(frames...), wiretest.WriteTimeout); err != nil {
		return err
	}
	for range 3 * keys {
		r, err := c.TryNext(wiretest.ReadTimeout)
		if err != nil {
			return err
		}
		op, ok := want[r.Owner]
		if !ok || r.Op != op {
			return fmt.Errorf("client %d: got %s, want %v for that owner (once)", ci, wiretest.Describe(r), op)
		}
		delete(want, r.Owner)
	}
	if r, err := c.TryNext(50 * time.Millisecond); err == nil {
		return fmt.Errorf("client %d: extra answer %s", ci, wiretest.Describe(r))
	}
	return nil
}

// A leader that answers E unavailable (draining: stepping down or shutting down) is relayed,
// for a waiter it drops and for a new acquire; releases keep working.
func TestLeaderUnavailableRelayed(t *testing.T) {
	p := startPair(t)
	holder := p.follower.dial(t)
	tok := holder.Grant(t, 1, 0, 60, "k")
	w := p.follower.dial(t)
	p.leader.queue(t, w, 5, "k", 1)

	p.leader.node.Drain()
	w.ExpectError(t, 5, wire.ReasonUnavailable)
	w.Send(t, wiretest.Acquire(6, 0, 60, "j"))
	w.ExpectError(t, 6, wire.ReasonUnavailable)
	holder.Send(t, wiretest.Release(2, tok, "k"))
	holder.ExpectOp(t, wire.OpRelease, 2)
	w.Alive(t, 7)
	idle(t, p.link)
}

// The follower's client going away leaves its waiter on the leader, and the link forgets it
// once the leader answers: nothing leaks.
func TestClientGoneLeavesNoLinkState(t *testing.T) {
	p := startPair(t)
	holder := p.leader.dial(t)
	tok := holder.Grant(t, 1, 0, 60, "k")
	c := p.follower.dial(t)
	p.leader.queue(t, c, 2, "k", 1)
	if st := p.link.Stats(); st.InFlight != 1 {
		t.Fatalf("link stats %+v, want the waiter in flight", st)
	}
	c.Close()
	p.follower.waitConns(t, 0)
	holder.Send(t, wiretest.Release(3, tok, "k"))
	holder.ExpectOp(t, wire.OpRelease, 3)
	// Granted to the link, whose client has gone: the follower's node gives the grant back
	// through the link (latch/1 has no cancel), so the key ends free and the link idle.
	eventually(t, clustertest.Bound, "the grant given back", func() bool {
		st := p.leader.node.Stats()
		return st.Keys == 0 && st.Waiters == 0
	})
	idle(t, p.link)
	// The link and its connection are still good for other clients.
	c2 := p.follower.dial(t)
	c2.Grant(t, 4, 0, 60, "j")
	if st := p.link.Stats(); st.Conns != 1 {
		t.Fatalf("link stats %+v, want one connection", st)
	}
}

// After SetLeader, requests in flight on the old leader's connection are answered there and
// relayed; new requests go to the new leader; the old connection closes once it is empty.
func TestLeaderChange(t *testing.T) {
	old := startLeader(t)
	cfg := cluster.DefaultConfig()
	cfg.TokenFloor = 1_000_000
	next := startLeader(t, cfg)
	link := newLink(t, old.peer)
	f := startFollower(t, link)

	holder := old.dial(t)
	otok := holder.Grant(t, 1, 0, 60, "k")
	c := f.dial(t)
	old.queue(t, c, 2, "k", 1)

	link.SetLeader(next.peer)
	c.Send(t, wiretest.Acquire(3, 0, 60, "k"))
	if ntok := c.ExpectGrant(t, 3); ntok <= 1_000_000 {
		t.Fatalf("token %d after the leader change: want one of the new leader's (> 1000000)", ntok)
	}
	if st := link.Stats(); st.Conns != 2 || st.InFlight != 1 || st.Leader != next.peer {
		t.Fatalf("link stats %+v, want the old connection draining its waiter and the new one", st)
	}
	holder.Send(t, wiretest.Release(4, otok, "k"))
	holder.ExpectOp(t, wire.OpRelease, 4)
	if tok := c.ExpectGrant(t, 2); tok <= otok || tok > 1_000_000 {
		t.Fatalf("waiter granted %d: want the old leader's next token", tok)
	}
	eventually(t, clustertest.Bound, "old connection closed", func() bool { return link.Stats().Conns == 1 })
	idle(t, link)
	f.untouched(t)
}

// TestGrantToADepartedClientIsGivenBack: a follower's client waits on the leader, then goes
// away; when the lock comes free the leader grants the forwarded waiter, and the follower's
// node (cluster.Node.Forwarded), finding the client's session detached, releases that grant
// through the link instead of leaving the lock held for its whole lease.
func TestGrantToADepartedClientIsGivenBack(t *testing.T) {
	p := startPair(t)
	holder := p.leader.dial(t)
	tok := holder.Grant(t, 1, 0, 60, "k")

	leaver := p.follower.dial(t)
	p.leader.queue(t, leaver, 7, "k", 1)
	leaver.Close()
	p.follower.waitConns(t, 0) // the follower's session has noticed the close

	holder.Send(t, wiretest.Release(2, tok, "k"))
	holder.ExpectOp(t, wire.OpRelease, 2)

	probe := p.follower.dial(t)
	eventually(t, clustertest.Bound, "the departed client's grant given back", func() bool {
		probe.Send(t, wiretest.Acquire(9, 0, 30, "k"))
		r := probe.Next(t)
		if r.Op == wire.OpAcquire {
			if r.Token <= tok+1 {
				t.Fatalf("token %d: want one above the departed client's grant (> %d)", r.Token, tok+1)
			}
			return true
		}
		return false
	})
}
