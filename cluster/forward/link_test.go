package forward_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Section 5, unavailable: no leader known, or the leader's forward channel refuses the dial.
// The request was definitely not applied; the client's connection stays.
func TestUnavailableWithoutLink(t *testing.T) {
	ld := startLeader(t)
	link := newLink(t, "", func(c *forward.Config) { c.RedialDelay = time.Hour })
	f := startFollower(t, link)
	c := f.dial(t)

	c.Send(t, wiretest.Acquire(5, 0, 60, "k"), wiretest.Release(6, 1, "k"))
	c.ExpectError(t, 5, wire.ReasonUnavailable)
	c.ExpectError(t, 6, wire.ReasonUnavailable)
	c.Alive(t, 7)

	// A leader whose listener is closed: the dial is refused.
	ln := listen(t)
	gone := ln.Addr().String()
	ln.Close()
	link.SetLeader(gone)
	c.Send(t, wiretest.Acquire(8, 3, 60, "k"))
	c.ExpectError(t, 8, wire.ReasonUnavailable)
	// Within RedialDelay the link does not dial again: answered at once.
	c.Send(t, wiretest.Acquire(9, 0, 60, "k"))
	c.ExpectError(t, 9, wire.ReasonUnavailable)
	c.Alive(t, 10)

	// A new leader is tried at once.
	link.SetLeader(ld.peer)
	c.Grant(t, 11, 0, 60, "k")
	f.untouched(t)
}

// Section 5, indeterminate: the link is lost after the request was written (a leader that
// swallows it and closes). Neither an acquire nor a release is sent again.
func TestIndeterminateWhenLostAfterSend(t *testing.T) {
	var frames atomic.Int32
	fk := startFake(t, func(nc net.Conn) {
		readRequests(nc, func(wire.Request) bool { frames.Add(1); return false })
		nc.Close()
	})
	link := newLink(t, fk.addr)
	f := startFollower(t, link)
	c := f.dial(t)
	c.Send(t, wiretest.Acquire(9, 5, 60, "k"))
	c.ExpectError(t, 9, wire.ReasonIndeterminate)
	c.Send(t, wiretest.Release(10, 1, "k"))
	c.ExpectError(t, 10, wire.ReasonIndeterminate)
	c.Alive(t, 11)
	c.ExpectSilent(t, 100*time.Millisecond)
	if n, d := frames.Load(), fk.dials.Load(); n != 2 || d != 2 {
		t.Fatalf("leader saw %d frames on %d connections; want each request exactly once, on its own connection", n, d)
	}
	idle(t, link)
}

// A stream from the leader that cannot be trusted kills the connection: everything in flight
// on it is indeterminate, and the next request dials again.
func TestUntrustedAnswersKillTheLink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(r wire.Request) []byte
	}{
		{"E with owner 0", func(wire.Request) []byte { return wiretest.Error(0, wire.ReasonBadRequest) }},
		{"E that closes", func(r wire.Request) []byte { return wiretest.Error(r.Owner, wire.ReasonAuthRequired) }},
		{"owner not in flight", func(r wire.Request) []byte { return wiretest.Short(wire.OpTimeout, r.Owner+1000) }},
		{"answer of another op", func(r wire.Request) []byte { return wiretest.Short(wire.OpRelease, r.Owner) }},
		{"hello", func(wire.Request) []byte { return wiretest.Hello(1, 0, [wire.NonceSize]byte{}) }},
		{"malformed", func(wire.Request) []byte { return []byte("Zgarbage\n") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The fake answers the first acquire (owner 1 on the link is "k") after the second
			// one is in flight too, so that both are lost.
			fk := startFake(t, func(nc net.Conn) {
				var first wire.Request
				readRequests(nc, func(r wire.Request) bool {
					if string(r.Key) == "k" {
						first = r
						return true
					}
					nc.Write(tc.reply(first))
					return true
				})
			})
			link := newLink(t, fk.addr)
			f := startFollower(t, link)
			c := f.dial(t)
			c.Send(t, wiretest.Acquire(1, 5, 60, "k"))
			eventually(t, clustertest.Bound, "first in flight", func() bool { return link.Stats().InFlight == 1 })
			c.Send(t, wiretest.Acquire(2, 5, 60, "j"))
			got := c.NextByOwner(t, 2)
			if got[1] != errResp(1, wire.ReasonIndeterminate) || got[2] != errResp(2, wire.ReasonIndeterminate) {
				t.Fatalf("answers %v, want E indeterminate for owners 1 and 2", got)
			}
			eventually(t, clustertest.Bound, "connection dropped", func() bool { return link.Stats().Conns == 0 })
			// The next request dials again (and this fake breaks that connection too).
			c.Send(t, wiretest.Release(3, 1, "x"))
			c.ExpectError(t, 3, wire.ReasonIndeterminate)
			if d := fk.dials.Load(); d != 2 {
				t.Fatalf("%d dials, want 2", d)
			}
			c.Alive(t, 4)
		})
	}
}

// A leader that never answers: after the wait plus AnswerTimeout the connection is taken for
// lost and the request is indeterminate.
func TestAnswerOverdue(t *testing.T) {
	t.Parallel()
	fk := startFake(t, func(nc net.Conn) { readRequests(nc, func(wire.Request) bool { return true }) })
	link := newLink(t, fk.addr, func(c *forward.Config) { c.AnswerTimeout = 300 * time.Millisecond })
	f := startFollower(t, link)
	c := f.dial(t)
	start := time.Now()
	c.Send(t, wiretest.Acquire(1, 1, 60, "k"))
	c.ExpectError(t, 1, wire.ReasonIndeterminate)
	between(t, "indeterminate", time.Since(start), 1300*time.Millisecond, clustertest.Bound)
	idle(t, link)
}

// blockedDial returns a Dial that waits until release is closed (or its ctx ends) and then
// dials addr over TCP, and counts its calls.
func blockedDial(addr string, release <-chan struct{}, calls *atomic.Int32) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		calls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return tcpDial(ctx, addr)
	}
}

// The queue of unsent requests is bounded: over it, E unavailable at once. Requests still
// queued when their unsent deadline passes are E unavailable too.
func TestQueueBoundAndUnsentDeadline(t *testing.T) {
	t.Parallel()
	ld := startLeader(t)
	release := make(chan struct{})
	var calls atomic.Int32
	link := newLink(t, ld.peer, func(c *forward.Config) {
		c.MaxQueued = 2
		c.UnsentTimeout = 200 * time.Millisecond
		c.Dial = latch1(blockedDial(ld.peer, release, &calls))
	})
	f := startFollower(t, link)
	c := f.dial(t)
	c.Send(t, wiretest.Acquire(1, 0, 60, "k"), wiretest.Acquire(2, 30, 60, "j"), wiretest.Acquire(3, 0, 60, "m"))
	c.ExpectError(t, 3, wire.ReasonUnavailable) // the queue holds 1 and 2 while the dial hangs
	if st := link.Stats(); st.Queued != 2 {
		t.Fatalf("link stats %+v, want 2 queued", st)
	}
	time.Sleep(400 * time.Millisecond) // past owner 1's unsent deadline, well inside 2's wait
	close(release)
	got := c.NextByOwner(t, 2)
	if got[1] != errResp(1, wire.ReasonUnavailable) || got[2].Op != wire.OpAcquire {
		t.Fatalf("answers %v: want E unavailable for 1 (queued past its deadline) and A for 2", got)
	}
	if st := ld.node.Stats(); st.Keys != 1 {
		t.Fatalf("leader stats %+v: only j may have been acquired", st)
	}
}

// Waits count from the follower's read: a request held up before it is written (here a dial
// the test holds) is sent with the time it has left, rounded up, so its T comes about wait
// after the follower read it and never earlier. One whose wait ran out while unsent is E
// unavailable (never T: the follower cannot know the key was held), and is never written.
//
// Causal, not timed: the wait the leader is sent is checked against the time the dial was
// held (measured, so a slow machine only lowers the bound it is held to, never fails it); the
// second dial is released only once the request's wait has run out (measured from when it was
// seen queued), and the next acquire on that connection is the first the leader sees.
func TestWaitCountsFromFollowerRead(t *testing.T) {
	t.Parallel()
	ld := startLeader(t)
	holder := ld.dial(t)
	holder.Grant(t, 1, 0, 60, "k")

	// A tap in front of the leader records the key and wait of each acquire it forwards.
	type written struct {
		key  string
		wait uint8
	}
	waits := make(chan written, 4)
	tap := startFake(t, func(nc net.Conn) {
		up, err := net.Dial("tcp", ld.peer)
		if err != nil {
			nc.Close()
			return
		}
		copied := make(chan struct{})
		defer func() { <-copied }()
		go func() {
			defer close(copied)
			buf := make([]byte, 4096)
			for {
				n, err := up.Read(buf)
				if n > 0 {
					nc.Write(buf[:n])
				}
				if err != nil {
					nc.Close()
					return
				}
			}
		}()
		readRequests(nc, func(r wire.Request) bool {
			if r.Op == wire.OpAcquire {
				waits <- written{string(r.Key), r.Wait}
			}
			up.Write(wire.AppendRequest(nil, &r))
			return true
		})
		up.Close()
	})
	// Each dial waits for a token on release (or for its ctx to end).
	release := make(chan struct{}, 1)
	link := newLink(t, tap.addr, func(c *forward.Config) {
		c.Dial = latch1(func(ctx context.Context, addr string) (net.Conn, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return tcpDial(ctx, addr)
		})
	})
	f := startFollower(t, link)
	c := f.dial(t)
	next := func() written {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case <-time.After(clustertest.Bound):
			t.Fatal("no acquire reached the leader")
			return written{}
		}
	}

	// A wait of 8 s, held unsent for at least 2 s: at most 6 s left when it is written.
	const wait, held = 8 * time.Second, 2 * time.Second
	start := time.Now()
	c.Send(t, wiretest.Acquire(2, uint8(wait/time.Second), 60, "k"))
	eventually(t, clustertest.Bound, "the acquire queued behind the dial", func() bool { return link.Stats().Queued == 1 })
	queued := time.Now() // the follower read it before this
	time.Sleep(held)
	released := time.Now() // it is written after this
	release <- struct{}{}
	c.ExpectOp(t, wire.OpTimeout, 2)
	if d := time.Since(start); d < wait {
		t.Fatalf("T %v after the acquire, before its %v wait, counted from the follower's read, ran out", d, wait)
	}
	// Left when written: at most wait - (released - queued), rounded up; counted from the write
	// it would be the whole wait. A slow machine leaves less, down to 1 (never 0: that is E).
	maxLeft := wait - released.Sub(queued)
	maxWait := uint8((maxLeft + time.Second - 1) / time.Second)
	if w := next(); w.key != "k" || w.wait < 1 || w.wait > maxWait {
		t.Fatalf("acquire written %+v, want key k with the time left rounded up: 1 to %d (at most %v left)", w, maxWait, maxLeft)
	}

	// A wait of 1 s, with the next dial held until that wait has run out: E unavailable, and
	// never written (the next acquire is the first the leader sees on the new connection).
	link.SetLeader("") // drop the connection: the next one is dialled (and held) again
	link.SetLeader(tap.addr)
	eventually(t, clustertest.Bound, "old connection closed", func() bool { return link.Stats().Conns == 0 })
	c.Send(t, wiretest.Acquire(3, 1, 60, "k"))
	eventually(t, clustertest.Bound, "the acquire queued behind the dial", func() bool { return link.Stats().Queued == 1 })
	time.Sleep(time.Second + 100*time.Millisecond) // read before now: its 1 s wait has run out
	release <- struct{}{}
	c.ExpectError(t, 3, wire.ReasonUnavailable)
	c.Send(t, wiretest.Acquire(4, 0, 60, "j"))
	if r := c.Next(t); r.Op != wire.OpAcquire || r.Owner != 4 {
		t.Fatalf("acquire of a free key after the dial: %s, want A for owner 4", wiretest.Describe(r))
	}
	if w := next(); w.key != "j" {
		t.Fatalf("the first acquire the leader saw after the held dial was %+v: the one whose wait ran out unsent was written", w)
	}
	c.Alive(t, 5)
}

// cutConn accepts only the first cut bytes of its first write, then fails it.
type cutConn struct {
	net.Conn
	cut int
}

func (c *cutConn) Write(b []byte) (int, error) {
	n, _ := c.Conn.Write(b[:min(c.cut, len(b))])
	return n, errors.New("injected write failure")
}

// A write that fails part-way: a frame of which a byte may have reached the socket is
// indeterminate, the frames after it never left and are unavailable.
func TestWriteFailureSplitsOutcomes(t *testing.T) {
	swallow := startFake(t, func(nc net.Conn) { readRequests(nc, func(wire.Request) bool { return true }) })
	release := make(chan struct{})
	var calls atomic.Int32
	link := newLink(t, swallow.addr, func(c *forward.Config) {
		dial := blockedDial(swallow.addr, release, &calls)
		c.Dial = latch1(func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return &cutConn{Conn: nc, cut: 5}, nil
		})
	})
	f := startFollower(t, link)
	c := f.dial(t)
	// Both are queued while the dial hangs, so they go out in one write.
	c.Send(t, wiretest.Acquire(1, 0, 60, "k"), wiretest.Release(2, 9, "k"))
	eventually(t, clustertest.Bound, "both queued", func() bool { return link.Stats().Queued == 2 })
	close(release)
	got := c.NextByOwner(t, 2)
	if got[1] != errResp(1, wire.ReasonIndeterminate) || got[2] != errResp(2, wire.ReasonUnavailable) {
		t.Fatalf("answers %v: want E indeterminate for 1 (5 bytes of it written) and E unavailable for 2", got)
	}
	c.Alive(t, 3)
	idle(t, link)
}

// Close answers queued requests E unavailable and requests in flight E indeterminate; after
// it every request is E unavailable at once.
func TestLinkClose(t *testing.T) {
	ld := startLeader(t)
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	queued := newLink(t, ld.peer, func(c *forward.Config) { c.Dial = latch1(blockedDial(ld.peer, release, &calls)) })
	swallow := startFake(t, func(nc net.Conn) { readRequests(nc, func(wire.Request) bool { return true }) })
	inflight := newLink(t, swallow.addr)
	fq, fi := startFollower(t, queued), startFollower(t, inflight)
	cq, ci := fq.dial(t), fi.dial(t)

	cq.Send(t, wiretest.Acquire(1, 30, 60, "k"))
	eventually(t, clustertest.Bound, "dialling", func() bool { return calls.Load() == 1 })
	ci.Send(t, wiretest.Acquire(2, 30, 60, "k"))
	eventually(t, clustertest.Bound, "in flight", func() bool { return inflight.Stats().InFlight == 1 })

	queued.Close()
	inflight.Close()
	cq.ExpectError(t, 1, wire.ReasonUnavailable)
	ci.ExpectError(t, 2, wire.ReasonIndeterminate)
	ci.Send(t, wiretest.Release(3, 1, "k"))
	ci.ExpectError(t, 3, wire.ReasonUnavailable)
	if st := inflight.Stats(); st.Conns != 0 || st.InFlight != 0 || st.Queued != 0 {
		t.Fatalf("closed link stats %+v, want nothing left", st)
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := forward.NewLink(forward.DefaultConfig()); err != forward.ErrNoDial {
		t.Fatalf("NewLink without Dial: %v, want ErrNoDial", err)
	}
	for name, edit := range map[string]func(*forward.Config){
		"DialTimeout":   func(c *forward.Config) { c.DialTimeout = 0 },
		"UnsentTimeout": func(c *forward.Config) { c.UnsentTimeout = -1 },
		"AnswerTimeout": func(c *forward.Config) { c.AnswerTimeout = 0 },
		"RedialDelay":   func(c *forward.Config) { c.RedialDelay = -1 },
		"MaxQueued":     func(c *forward.Config) { c.MaxQueued = 0 },
	} {
		c := forward.DefaultConfig()
		c.Dial = latch1(tcpDial)
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s out of range: Validate accepted it", name)
		}
	}
}

// A connection that fails after a batch was registered but before its Write began: the
// requests were never sent, so they are E unavailable (the client may retry), not
// indeterminate.
func TestFailBeforeWriteIsUnavailable(t *testing.T) {
	t.Parallel()
	ld := startLeader(t)
	link := newLink(t, ld.peer)
	f := startFollower(t, link)
	c := f.dial(t)
	forward.FailBeforeNextWrite(link)
	c.Send(t, wiretest.Acquire(1, 5, 60, "k"))
	c.ExpectError(t, 1, wire.ReasonUnavailable)
	// The link dials again and serves.
	eventually(t, clustertest.Bound, "a grant over a new connection", func() bool {
		c.Send(t, wiretest.Acquire(2, 0, 60, "k"))
		r := c.Next(t)
		return r.Op == wire.OpAcquire && r.Owner == 2
	})
}
