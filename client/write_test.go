package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// overlapConn records whether two Writes were ever in progress at once, and slows the first
// health ping's Write down so that an inline write would overlap it if it could.
type overlapConn struct {
	net.Conn
	inWrite     atomic.Int32
	overlapped  atomic.Bool
	pinged      atomic.Bool
	pingEntered chan struct{}
}

func (o *overlapConn) Write(p []byte) (int, error) {
	if o.inWrite.Add(1) > 1 {
		o.overlapped.Store(true)
	}
	defer o.inWrite.Add(-1)
	if len(p) > 0 && p[0] == byte(wire.OpPing) && o.pinged.CompareAndSwap(false, true) {
		close(o.pingEntered)
		time.Sleep(200 * time.Millisecond)
	}
	return o.Conn.Write(p)
}

// A health ping and a caller's inline write share the connection's write buffer: they take
// turns, so a release written while a ping is being written reaches the server intact (it
// once merged with the ping into one frame with a garbage token, answered N).
func TestPingNeverOverlapsAnInlineWrite(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t)
	oc := &overlapConn{pingEntered: make(chan struct{})}
	dial := wrapFirstDial(func(nc net.Conn) net.Conn { oc.Conn = nc; return oc })
	cl, err := newClient(Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, PingInterval: 10 * time.Second, FirstOwner: 200}, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	fc := fs.next(t)
	start := clk.Now()
	eventually(t, clustertest.Bound, "ping timer", func() bool { return clk.HasTimerAt(start.Add(10 * time.Second)) })
	clk.Advance(10 * time.Second)
	<-oc.pingEntered
	res := releaseAsync(cl, context.Background(), "jobs/nightly", 5)

	ping := fc.expect(t, wire.OpPing)
	rel := fc.expect(t, wire.OpRelease)
	if rel.Token != 5 || string(rel.Key) != "jobs/nightly" {
		t.Fatalf("the server read release token %d key %q, want 5 %q", rel.Token, rel.Key, "jobs/nightly")
	}
	fc.send(t, wire.Response{Op: wire.OpPing, Owner: ping.Owner}, wire.Response{Op: wire.OpRelease, Owner: rel.Owner})
	if err := waitErr(t, res, clustertest.Bound, "Release"); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if oc.overlapped.Load() {
		t.Fatal("two writes were in progress on one connection at once")
	}
}

// stallConn accepts the hello, then blocks every Write like a full socket buffer: until the
// write deadline or Close. It records how far ahead the deadline of a blocked write was.
type stallConn struct {
	net.Conn
	writes    atomic.Int32
	closeOnce sync.Once
	closed    chan struct{}
	deadline  atomic.Int64 // unix ns of the last SetWriteDeadline
	ahead     atomic.Int64 // the deadline minus the time the first blocked Write began
}

func (s *stallConn) SetWriteDeadline(t time.Time) error {
	s.deadline.Store(t.UnixNano())
	return s.Conn.SetWriteDeadline(t)
}

func (s *stallConn) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return s.Conn.Close()
}

func (s *stallConn) Write(p []byte) (int, error) {
	if s.writes.Add(1) == 1 {
		return s.Conn.Write(p)
	}
	for {
		dl := time.Unix(0, s.deadline.Load())
		s.ahead.CompareAndSwap(0, int64(time.Until(dl)))
		select {
		case <-s.closed:
			return 0, net.ErrClosed
		case <-time.After(min(time.Until(dl), 50*time.Millisecond)):
			if !time.Now().Before(time.Unix(0, s.deadline.Load())) {
				return 0, &net.OpError{Op: "write", Err: errors.New("i/o timeout (stalled peer)")}
			}
		}
	}
}

func stalledClient(t *testing.T) (*Client, *stallConn) {
	t.Helper()
	fs := newFakeServer(t)
	sc := &stallConn{closed: make(chan struct{})}
	dial := wrapFirstDial(func(nc net.Conn) net.Conn { sc.Conn = nc; return sc })
	cl, err := newClient(Config{Servers: []string{fs.addr}, Conns: 1}, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	fs.next(t)
	eventually(t, clustertest.Bound, "the connection registered and idle (its writer waiting)", func() bool {
		cl.q.mu.Lock()
		defer cl.q.mu.Unlock()
		cn := cl.q.idleLocked()
		if cn != nil {
			cn.turn.Unlock()
		}
		return cn != nil
	})
	return cl, sc
}

// A caller's own (inline) write that blocks is bounded by the call's answer deadline, as its
// timer would bound it once running, not only by the 5 s write-stall bound.
func TestBlockedInlineWriteEndsByTheAnswerDeadline(t *testing.T) {
	cl, sc := stalledClient(t)
	_, err := cl.Acquire(context.Background(), "stall", 0, AcquireOptions{Wait: time.Second})
	if err == nil {
		t.Fatal("an acquire whose write never went out returned a ticket")
	}
	// wait 1 s stamped plus ReplyGrace: the write may block until then, not 5 s.
	if ahead := time.Duration(sc.ahead.Load()); ahead <= 0 || ahead > time.Second+ReplyGrace+100*time.Millisecond {
		t.Fatalf("the blocked write's deadline was %v ahead, want at most the answer clustertest.Bound %v", ahead, time.Second+ReplyGrace)
	}
}

// A caller that cancels its context while its inline write is blocked gets a definite
// non-acquire (nothing was written: ErrCanceled, or ErrTimeout once its deadline has passed
// too) when the write ends, by its answer deadline (wait 1 s + ReplyGrace), not after the
// 5 s write-stall bound.
func TestCanceledInlineWriteEndsByTheAnswerDeadline(t *testing.T) {
	cl, _ := stalledClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := cl.Acquire(ctx, "stall", 0, AcquireOptions{Wait: time.Second})
	if !errors.Is(err, ErrCanceled) && !errors.Is(err, ErrTimeout) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("Acquire = %v, want ErrCanceled or ErrTimeout (nothing was written)", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Acquire returned %v after it began; its write should have ended by about 2 s", d)
	}
}
