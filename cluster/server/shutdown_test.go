package server_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Server.Shutdown: stop accepting, answer every waiter E unavailable (it was never granted:
// safe to retry elsewhere, section 5), flush, close every session.

func TestShutdownAnswersWaiters(t *testing.T) {
	ts := startServer(t)
	holder, idle := ts.dial(t), ts.dial(t)
	w1, w2 := ts.dial(t), ts.dial(t)
	holder.Send(t, wiretest.Acquire(1, 0, 60, "k"), wiretest.Acquire(2, 0, 60, "j"))
	holder.ExpectGrant(t, 1)
	holder.ExpectGrant(t, 2)
	w1.Send(t, wiretest.Acquire(4242, 60, 60, "k"), wiretest.Acquire(4243, 60, 60, "j"))
	w2.Send(t, wiretest.Acquire(0x0A0A0A0A0A0A0A0A, 60, 60, "k"))
	ts.waitWaiters(t, 3)

	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		done <- ts.srv.Shutdown(ctx)
	}()
	got := w1.NextByOwner(t, 2)
	if got[4242] != errResp(4242, wire.ReasonUnavailable) || got[4243] != errResp(4243, wire.ReasonUnavailable) {
		t.Fatalf("waiters answered %v, want E unavailable for 4242 and 4243", got)
	}
	w1.ExpectClosed(t)
	w2.ExpectErrorAndClose(t, 0x0A0A0A0A0A0A0A0A, wire.ReasonUnavailable)
	holder.ExpectClosed(t)
	idle.ExpectClosed(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Shutdown did not return")
	}
	within(t, "Shutdown", time.Since(start), 0, 10*time.Second)
	if st := ts.node.Stats(); !st.Draining || st.Waiters != 0 || st.Pending != 0 {
		t.Fatalf("stats after shutdown %+v, want draining with no waiters", st)
	}
	// New connections are refused.
	if c, err := wiretest.DialErr(ts.addr); err == nil {
		c.Close()
		t.Fatalf("dial after Shutdown succeeded")
	}
}

// Shutdown of an idle server returns at once and Serve returns ErrServerClosed (checked by
// the cleanup); a second Shutdown is harmless.
func TestShutdownIdle(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	c.Alive(t, 1)
	c.Close()
	eventually(t, 10*time.Second, "connection gone", func() bool { return ts.connections(t) == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	ts.stop()
	if c, err := wiretest.DialErr(ts.addr); err == nil {
		c.Close()
		t.Fatalf("dial after Shutdown succeeded")
	}
}

// A client that never reads cannot hold Shutdown past its context: the session is closed.
func TestShutdownDeadlineClosesStuckSession(t *testing.T) {
	slow(t)
	ts := startServer(t)
	c := ts.dial(t)
	other := ts.dial(t)
	floodUntilBlocked(t, c, time.Second, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ts.srv.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Shutdown returned %v (the stuck write may have timed out first)", err)
	}
	within(t, "Shutdown with a 500ms context", time.Since(start), 0, clustertest.Bound+wire.WriteStallTimeout)
	other.ExpectClosed(t)
	eventually(t, 10*time.Second, "every session ended", func() bool { return ts.connections(t) == 0 })
}

// Section 5: E unavailable keeps the connection. A draining node (the first step of
// Shutdown) answers acquires so while releases and pings still work.
func TestUnavailableKeepsConnection(t *testing.T) {
	ts := startServer(t)
	c, w := ts.dial(t), ts.dial(t)
	c.Send(t, wiretest.Acquire(1, 0, 60, "k"))
	tok := c.ExpectGrant(t, 1)
	w.Send(t, wiretest.Acquire(2, 60, 60, "k"))
	ts.waitWaiters(t, 1)
	ts.node.Drain()
	w.ExpectError(t, 2, wire.ReasonUnavailable)
	w.Alive(t, 3)
	for _, f := range []struct {
		frame []byte
		owner uint64
	}{
		{wiretest.Acquire(4, 0, 60, "free"), 4},
		{wiretest.Acquire(5, 0, 60, "k"), 5},
		{wiretest.Acquire(6, 60, 60, "k"), 6},
	} {
		c.Send(t, f.frame)
		c.ExpectError(t, f.owner, wire.ReasonUnavailable)
		c.Alive(t, 100+f.owner)
	}
	c.Send(t, wiretest.Release(7, tok, "k"))
	c.Expect(t, resp(wire.OpRelease, 7))
	if st := ts.node.Stats(); st.Keys != 0 || st.Waiters != 0 {
		t.Fatalf("stats %+v, want nothing held or waiting", st)
	}
}

// Shutdown must end a session whose client keeps sending: a busy reader must not lose the
// shutdown's read deadline to its own progress-timeout bookkeeping.
func TestShutdownWhileClientStreams(t *testing.T) {
	ts := startServer(t)
	const streams = 4
	var ended sync.WaitGroup
	stop := make(chan struct{})
	var conns []*wiretest.Conn
	defer func() {
		close(stop)
		for _, c := range conns {
			c.Close()
		}
		ended.Wait()
	}()
	for range streams {
		c := ts.dial(t)
		conns = append(conns, c)
		nc := c.NetConn()
		frames := make([][]byte, 1000)
		for i := range frames {
			frames[i] = wiretest.Ping(uint64(i + 1))
		}
		chunk := wiretest.Concat(frames...)
		ended.Add(2)
		go func() { // writer: pings without pause, frames cut anywhere across writes
			defer ended.Done()
			for off := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				nc.SetWriteDeadline(time.Now().Add(time.Second))
				n, err := nc.Write(chunk[off:min(off+777, len(chunk))])
				off = (off + n) % len(chunk)
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
			}
		}()
		go func() { // reader: drains the pongs so the server never blocks writing
			defer ended.Done()
			buf := make([]byte, 64<<10)
			for {
				nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				if _, err := nc.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // let the streams get going
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with clients streaming: %v after %v", err, time.Since(start))
	}
	within(t, "Shutdown with clients streaming", time.Since(start), 0, clustertest.Bound)
}

// Drain answers waiters E unavailable but keeps reading every session: a new acquire is
// answered E unavailable (definite), a release still works, a forwarded connection is still
// taken, and no new client connection is. Shutdown then closes the sessions.
func TestDrainKeepsAnswering(t *testing.T) {
	ts := startServer(t)
	holder, w := ts.dial(t), ts.dial(t)
	tok := holder.Do(t, wiretest.Acquire(1, 0, 60, "k")).Token
	w.Send(t, wiretest.Acquire(2, 60, 60, "k"))
	ts.waitWaiters(t, 1)

	ts.srv.Drain()
	w.ExpectError(t, 2, wire.ReasonUnavailable)
	w.Send(t, wiretest.Acquire(3, 0, 60, "j"))
	w.ExpectError(t, 3, wire.ReasonUnavailable)
	holder.Send(t, wiretest.Release(4, tok, "k"))
	holder.ExpectOp(t, wire.OpRelease, 4)
	if c, err := wiretest.DialErr(ts.addr); err == nil {
		c.Close()
		t.Fatalf("a client connection was taken while draining")
	}
	a, b := net.Pipe()
	if err := ts.srv.ServePeer(a, 0, ""); err != nil {
		t.Fatalf("ServePeer while draining: %v", err)
	}
	b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after Drain: %v", err)
	}
	holder.ExpectClosed(t)
	w.ExpectClosed(t)
}
