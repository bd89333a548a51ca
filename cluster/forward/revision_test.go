package forward_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/wire"
)

// Revision 2 across the link: the link is latch/1 or revised per connection (what Config.Dial
// says), and translates per request, since the latch/1 and revised sessions of a follower
// share it.

// replies records what a link delivers, one channel per test.
type replies chan wire.Response

func (r replies) Reply(resp wire.Response) { r <- resp }

// next returns the next reply, failing the test if none comes within 10 s.
func (r replies) next(t *testing.T) wire.Response {
	t.Helper()
	select {
	case resp := <-r:
		return resp
	case <-time.After(10 * time.Second):
		t.Fatal("no reply within 10 s")
		return wire.Response{}
	}
}

// expect fails the test unless the next reply is want.
func (r replies) expect(t *testing.T, want wire.Response) {
	t.Helper()
	if got := r.next(t); got != want {
		t.Fatalf("reply %+v, want %+v", got, want)
	}
}

func extendReq(owner, token uint64, lease uint16, key string) *wire.Request {
	return &wire.Request{Op: wire.OpExtend, Owner: owner, Token: token, Lease: lease, Key: []byte(key)}
}

func acquireReq(owner uint64, wait uint8, key string) *wire.Request {
	return &wire.Request{Op: wire.OpAcquire, Owner: owner, Wait: wait, Lease: 60, Key: []byte(key)}
}

// scripted is a fake leader's forward channel that decodes requests with revs and answers
// each with answer (nothing when it returns nil), counting the frames it read.
func scripted(t *testing.T, revs uint8, answer func(r wire.Request) *wire.Response) (*fake, *atomic.Int32) {
	t.Helper()
	var frames atomic.Int32
	f := startFake(t, func(nc net.Conn) {
		dec := wire.NewRequestDecoder()
		dec.SetFlags(revs)
		buf := make([]byte, 4096)
		for {
			n, err := nc.Read(buf)
			p := buf[:n]
			for len(p) > 0 {
				used, done, derr := dec.Decode(p)
				p = p[used:]
				if derr != nil { // as a leader does: E bad_request, owner 0, close
					nc.Write(wire.AppendResponse(nil, &wire.Response{Op: wire.OpError, Reason: wire.ReasonBadRequest}))
					nc.Close()
					return
				}
				if done {
					frames.Add(1)
					if a := answer(*dec.Request()); a != nil {
						nc.Write(wire.AppendResponse(nil, a))
					}
				}
			}
			if err != nil {
				return
			}
		}
	})
	return f, &frames
}

// An extend on a latch/1 link is answered E unsupported by the follower and never written:
// a latch/1 leader would read L as an unknown op and close the link, making everything in
// flight on it indeterminate. The link stays up for everything else, on the same connection.
func TestExtendOnLatch1LinkIsUnsupported(t *testing.T) {
	ld := startLeader(t) // a latch/1 forward channel: ServePeer
	var dials atomic.Int32
	link := newLink(t, ld.peer, func(c *forward.Config) {
		c.Dial = latch1(func(ctx context.Context, addr string) (net.Conn, error) { dials.Add(1); return tcpDial(ctx, addr) })
	})
	out := make(replies, 8)
	// The first request finds no connection: the extend waits for the dial like any other,
	// and is answered once the dial says the channel is latch/1.
	link.Forward(extendReq(5, 1, 30, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpError, Owner: 5, Reason: wire.ReasonUnsupported})
	link.Forward(acquireReq(6, 0, "k"), time.Now(), out)
	g := out.next(t)
	if g.Op != wire.OpAcquire || g.Owner != 6 || g.Token == 0 || g.Age != 0 {
		t.Fatalf("grant through a latch/1 link: %+v, want A for owner 6 with age 0", g)
	}
	link.Forward(extendReq(7, g.Token, 30, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpError, Owner: 7, Reason: wire.ReasonUnsupported})
	link.Forward(&wire.Request{Op: wire.OpRelease, Owner: 8, Token: g.Token, Key: []byte("k")}, time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpRelease, Owner: 8})
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials, want 1: the extends must not have broken the connection", n)
	}
	if st := link.Stats(); st.Revs != 0 || st.Conns != 1 {
		t.Fatalf("link stats %+v, want one latch/1 connection", st)
	}
	idle(t, link)
}

// On a revised link an extend is written and its answer relayed, with the client's owner:
// L, N and E (unsupported among them, from a leader whose cluster has not switched revision
// 2 on). A grant comes as G with the leader's age and reaches the session as the node's own
// grants do (A with the age: the session writes G or A for its client); the follower adds
// nothing to the age.
func TestRevisedLinkRelaysExtendsAndAges(t *testing.T) {
	var mu sync.Mutex
	var got []wire.Request
	ld, frames := scripted(t, wire.FlagLeases, func(r wire.Request) *wire.Response {
		mu.Lock()
		r.Key = append([]byte(nil), r.Key...)
		got = append(got, r)
		mu.Unlock()
		switch {
		case r.Op == wire.OpAcquire:
			return &wire.Response{Op: wire.OpGranted, Owner: r.Owner, Token: 77, Age: 1500}
		case r.Op == wire.OpExtend && r.Token == 77:
			return &wire.Response{Op: wire.OpExtend, Owner: r.Owner}
		case r.Op == wire.OpExtend && r.Token == 78:
			return &wire.Response{Op: wire.OpError, Owner: r.Owner, Reason: wire.ReasonUnsupported}
		case r.Op == wire.OpExtend:
			return &wire.Response{Op: wire.OpNotHeld, Owner: r.Owner}
		}
		return &wire.Response{Op: wire.OpError, Owner: r.Owner, Reason: wire.ReasonInternal}
	})
	link := newLink(t, ld.addr, func(c *forward.Config) { c.Dial = revised(tcpDial) })
	out := make(replies, 8)
	link.Forward(acquireReq(5, 3, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpAcquire, Owner: 5, Token: 77, Age: 1500})
	link.Forward(extendReq(6, 77, 90, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpExtend, Owner: 6})
	link.Forward(extendReq(7, 12, 90, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpNotHeld, Owner: 7})
	link.Forward(extendReq(8, 78, 90, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpError, Owner: 8, Reason: wire.ReasonUnsupported})
	if st := link.Stats(); st.Revs != wire.FlagLeases {
		t.Fatalf("link stats %+v, want a connection of revision 2", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if frames.Load() != 4 || len(got) != 4 {
		t.Fatalf("the leader read %d frames, want 4", frames.Load())
	}
	if e := got[1]; e.Op != wire.OpExtend || e.Token != 77 || e.Lease != 90 || string(e.Key) != "k" || e.Owner == 6 {
		t.Fatalf("the extend as written: %+v, want token 77, lease 90, key k, under a link owner", e)
	}
	idle(t, link)
}

// A grant on a latch/1 link (an A) reaches the session with age 0: a latch/1 leader
// measures none, and the follower adds none of its own.
func TestLatch1GrantHasAgeZero(t *testing.T) {
	ld, _ := scripted(t, 0, func(r wire.Request) *wire.Response {
		return &wire.Response{Op: wire.OpAcquire, Owner: r.Owner, Token: 9}
	})
	link := newLink(t, ld.addr, func(c *forward.Config) { c.Dial = latch1(tcpDial) })
	out := make(replies, 2)
	link.Forward(acquireReq(5, 0, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpAcquire, Owner: 5, Token: 9})
}

// A frame of the other revision breaks the stream: a G on a latch/1 link, an A on a revised
// one. The connection fails and its requests are indeterminate, as for any frame that
// cannot be trusted; the next request dials again.
func TestGrantOfTheOtherRevisionKillsTheLink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		revs  uint8
		grant wire.Op
	}{
		{"G on a latch/1 link", 0, wire.OpGranted},
		{"A on a revised link", wire.FlagLeases, wire.OpAcquire},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ld, _ := scripted(t, tc.revs, func(r wire.Request) *wire.Response {
				return &wire.Response{Op: tc.grant, Owner: r.Owner, Token: 9, Age: 10}
			})
			link := newLink(t, ld.addr, func(c *forward.Config) {
				c.Dial = func(ctx context.Context, addr string) (net.Conn, uint8, error) {
					nc, err := tcpDial(ctx, addr)
					return nc, tc.revs, err
				}
			})
			out := make(replies, 2)
			link.Forward(acquireReq(5, 0, "k"), time.Now(), out)
			out.expect(t, wire.Response{Op: wire.OpError, Owner: 5, Reason: wire.ReasonIndeterminate})
			eventually(t, clustertest.Bound, "connection dropped", func() bool { return link.Stats().Conns == 0 })
			link.Forward(acquireReq(6, 0, "k"), time.Now(), out)
			out.expect(t, wire.Response{Op: wire.OpError, Owner: 6, Reason: wire.ReasonIndeterminate})
			if n := ld.dials.Load(); n != 2 {
				t.Fatalf("%d dials, want 2", n)
			}
		})
	}
}

// An extend written to a revised link whose connection is then lost is indeterminate, as a
// release is, and is never written again; one that could not be written is unavailable.
func TestExtendOutcomesOnLoss(t *testing.T) {
	ld, frames := scripted(t, wire.FlagLeases, func(wire.Request) *wire.Response { return nil })
	link := newLink(t, ld.addr, func(c *forward.Config) { c.Dial = revised(tcpDial) })
	out := make(replies, 4)
	link.Forward(extendReq(5, 77, 30, "k"), time.Now(), out)
	eventually(t, clustertest.Bound, "the extend written", func() bool { return frames.Load() == 1 })
	ld.mu.Lock()
	for _, nc := range ld.conns {
		nc.Close()
	}
	ld.mu.Unlock()
	out.expect(t, wire.Response{Op: wire.OpError, Owner: 5, Reason: wire.ReasonIndeterminate})

	link.SetLeader("")
	link.Forward(extendReq(6, 77, 30, "k"), time.Now(), out)
	out.expect(t, wire.Response{Op: wire.OpError, Owner: 6, Reason: wire.ReasonUnavailable})
	if n := frames.Load(); n != 1 {
		t.Fatalf("the leader read %d frames, want the one extend, once", n)
	}
}
