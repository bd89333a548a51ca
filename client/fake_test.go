package client

// Tests against the scripted fake server, with the fake clock where time matters.

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// fakeClient is a one-connection client of fs on the fake clock clk.
func fakeClient(t *testing.T, clk *clustertest.FakeClock, servers ...string) *Client {
	t.Helper()
	return newTestClient(t, Config{Servers: servers, Conns: 1, Clock: clk})
}

func TestFakeNoAnswerWaitZero(t *testing.T) {
	t.Parallel() // waits in real time
	for _, half := range []bool{false, true} {
		name := "whole frame read"
		if half {
			name = "server hangs after half a frame"
		}
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			fs := newFakeServer(t)
			cl := fakeClient(t, clk, fs.addr)
			ch := acquireAsync(cl, context.Background(), "hang", 0, AcquireOptions{})
			fc := fs.next(t)
			frame := wire.AppendRequest(nil, &wire.Request{Op: wire.OpAcquire, Owner: 1, Lease: 30, Key: []byte("hang")})
			if half {
				b := make([]byte, 5)
				fc.nc.SetReadDeadline(time.Now().Add(clustertest.Bound))
				if _, err := io.ReadFull(fc.nc, b); err != nil {
					t.Fatal(err)
				}
				if string(b) != string(frame[:5]) {
					t.Fatalf("first bytes %q, want %q", b, frame[:5])
				}
			} else {
				a := fc.expect(t, wire.OpAcquire)
				if a.Wait != 0 {
					t.Fatalf("wait 0 stamped as %d", a.Wait)
				}
			}
			clk.Advance(IOTimeout - time.Nanosecond)
			pending(t, ch, 100*time.Millisecond)
			clk.Advance(time.Nanosecond)
			r := wait(t, ch, clustertest.Bound)
			if !errors.Is(r.err, ErrIndeterminate) {
				t.Fatalf("no answer: %v, want ErrIndeterminate", r.err)
			}
			// Exactly that connection is closed, and the acquire is never sent again.
			if half {
				fc.nc.SetReadDeadline(time.Now().Add(clustertest.Bound))
				rest, err := io.ReadAll(fc.nc)
				if err != nil || string(rest) != string(frame[5:]) {
					t.Fatalf("rest of the stream %q (%v), want only the rest of the frame, then EOF", rest, err)
				}
			} else {
				fc.closed(t, clustertest.Bound)
			}
			fc2 := fs.next(t) // the pool replaced the connection
			fc2.silent(t, 200*time.Millisecond)
		})
	}
}

func TestFakeReplyGrace(t *testing.T) {
	// wait > 0: the answer is awaited until written_at + stamped wait + ReplyGrace.
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := fakeClient(t, clk, fs.addr)
	fc := fs.next(t)

	t.Run("T in the grace is a definite timeout", func(t *testing.T) {
		ch := acquireAsync(cl, context.Background(), "g", 0, AcquireOptions{Wait: 3 * time.Second})
		a := fc.expect(t, wire.OpAcquire)
		clk.Advance(3*time.Second + ReplyGrace - time.Nanosecond)
		pending(t, ch, 50*time.Millisecond)
		fc.send(t, short(wire.OpTimeout, a.Owner))
		if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrTimeout) {
			t.Fatalf("T in the grace: %v, want ErrTimeout", r.err)
		}
	})
	t.Run("no answer by the end of the grace", func(t *testing.T) {
		ch := acquireAsync(cl, context.Background(), "g", 0, AcquireOptions{Wait: 2500 * time.Millisecond})
		a := fc.expect(t, wire.OpAcquire)
		if a.Wait != 3 {
			t.Fatalf("stamped %d, want 3", a.Wait)
		}
		clk.Advance(2500 * time.Millisecond) // the operation deadline
		pending(t, ch, 50*time.Millisecond)
		clk.Advance(500*time.Millisecond + ReplyGrace - time.Nanosecond)
		pending(t, ch, 50*time.Millisecond)
		clk.Advance(time.Nanosecond)
		if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrIndeterminate) {
			t.Fatalf("no answer: %v, want ErrIndeterminate", r.err)
		}
		fc.closed(t, clustertest.Bound)
	})
}

func TestFakeAuthFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []fakeOption
		secret []byte
		want   string
	}{
		{"bad server proof", []fakeOption{withFakeSecret(secretOne), withBadProof()}, secretOne, "wrong server proof"},
		{"wrong secret", []fakeOption{withFakeSecret(secretOne)}, secretWrong, "auth_failed"},
		{"downgrade", nil, secretOne, "no downgrade"},
		{"bad version", []fakeOption{withHelloError(wire.ReasonBadVersion)}, nil, "bad_version"},
		{"secret missing", []fakeOption{withFakeSecret(secretOne)}, nil, "requires a secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeServer(t, tc.opts...)
			cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Secret: tc.secret})
			_, err := cl.Acquire(context.Background(), "k", 0, AcquireOptions{Wait: time.Minute})
			if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Acquire: %v, want ErrAuth (%s)", err, tc.want)
			}
			if fs.handshook.Load() > 0 { // the server thinks the handshake went fine: nothing may follow
				fs.next(t).closed(t, clustertest.Bound)
			}
		})
	}
}

func TestFakeUnsentFailoverDialRefused(t *testing.T) {
	dead := clustertest.DeadAddr(t)
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{dead, fs.addr}, Conns: 1, FirstOwner: 500})
	ch := acquireAsync(cl, context.Background(), "fo", 0, AcquireOptions{})
	fc := fs.next(t)
	a := fc.expect(t, wire.OpAcquire)
	if a.Owner != 500 || a.Wait != 0 {
		t.Fatalf("request %+v", a)
	}
	fc.send(t, granted(a.Owner, 9))
	if r := wait(t, ch, clustertest.Bound); r.err != nil || r.t.Token != 9 {
		t.Fatalf("Acquire: %v", r.err)
	}
	if st := cl.Stats(); st.DialFailures == 0 {
		t.Fatalf("stats %+v: want a dial failure", st)
	}
}

// breakingConn fails its failAt-th Write without writing a byte, and closes.
type breakingConn struct {
	net.Conn
	writes atomic.Int32
	failAt int32
}

func (b *breakingConn) Write(p []byte) (int, error) {
	if b.writes.Add(1) == b.failAt {
		b.Conn.Close()
		return 0, errors.New("injected: connection broke before any byte was written")
	}
	return b.Conn.Write(p)
}

func TestFakeUnsentFailoverWriteFails(t *testing.T) {
	// wait 0: the immediate attempt fails over within its 5 s, with the same owner.
	fs1, fs2 := newFakeServer(t), newFakeServer(t)
	dial := wrapFirstDial(func(nc net.Conn) net.Conn { return &breakingConn{Conn: nc, failAt: 2} }) // write 1 is the hello
	cl, err := newClient(Config{Servers: []string{fs1.addr, fs2.addr}, Conns: 1, FirstOwner: 70}, dial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	fc1 := fs1.next(t)
	ch := acquireAsync(cl, context.Background(), "wf", 0, AcquireOptions{})
	fc2 := fs2.next(t)
	a := fc2.expect(t, wire.OpAcquire)
	if a.Owner != 70 || a.Wait != 0 {
		t.Fatalf("resent request %+v, want owner 70, wait 0", a)
	}
	fc2.send(t, granted(70, 3))
	if r := wait(t, ch, clustertest.Bound); r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	fc1.closed(t, clustertest.Bound) // nothing of it reached the first server
	if st := cl.Stats(); st.Failovers != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFakeUnavailableFailsOver(t *testing.T) {
	t.Run("another server grants", func(t *testing.T) {
		fs1, fs2 := newFakeServer(t), newFakeServer(t)
		clk := newFakeClock()
		cl := fakeClient(t, clk, fs1.addr, fs2.addr)
		ch := acquireAsync(cl, context.Background(), "u", 0, AcquireOptions{Wait: 10 * time.Second})
		fc1 := fs1.next(t)
		a1 := fc1.expect(t, wire.OpAcquire)
		clk.Advance(1500 * time.Millisecond)
		fc1.send(t, errResp(a1.Owner, wire.ReasonUnavailable))
		fc1.closed(t, clustertest.Bound) // retired: its server cannot serve now
		fc2 := fs2.next(t)
		a2 := fc2.expect(t, wire.OpAcquire)
		if a2.Owner != a1.Owner || a2.Wait != 9 {
			t.Fatalf("failover request %+v, want owner %d, wait 9 (10 s - 1.5 s, rounded up)", a2, a1.Owner)
		}
		fc2.send(t, granted(a2.Owner, 11))
		if r := wait(t, ch, clustertest.Bound); r.err != nil || r.t.Token != 11 {
			t.Fatalf("Acquire: %v", r.err)
		}
	})
	t.Run("every server unavailable", func(t *testing.T) {
		// Every server refuses every attempt: the call asks them again until its deadline,
		// then says that no server answered, and which ones it tried.
		fs1, fs2 := newFakeServer(t), newFakeServer(t)
		e := newElecting(t, fs1, fs2)
		cl := newTestClient(t, Config{Servers: []string{fs1.addr, fs2.addr}, Conns: 1})
		ch := acquireAsync(cl, context.Background(), "u", 0, AcquireOptions{Wait: 2 * time.Second})
		r := wait(t, ch, clustertest.Bound)
		unreachable(t, "Acquire", r.err, fs1.addr+" answered E unavailable", fs2.addr+" answered E unavailable")
		if st := cl.Stats(); st.Unavailable != 1 {
			t.Fatalf("stats %+v", st)
		}
		if n := e.refused.Load(); n < 3 {
			t.Fatalf("%d attempts refused: want the servers asked again within the wait", n)
		}
	})
}

func TestFakeIndeterminateKeepsConnection(t *testing.T) {
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	ch := acquireAsync(cl, context.Background(), "i", 0, AcquireOptions{Wait: time.Minute})
	fc := fs.next(t)
	a := fc.expect(t, wire.OpAcquire)
	fc.send(t, errResp(a.Owner, wire.ReasonIndeterminate))
	r := wait(t, ch, clustertest.Bound)
	var se *ServerError
	if !errors.Is(r.err, ErrIndeterminate) || !errors.As(r.err, &se) {
		t.Fatalf("Acquire: %v, want ErrIndeterminate", r.err)
	}
	pch := make(chan error, 1)
	go func() { pch <- cl.Ping(context.Background()) }()
	p := fc.expect(t, wire.OpPing)
	fc.send(t, short(wire.OpPing, p.Owner))
	if err := <-pch; err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if fs.accepted.Load() != 1 {
		t.Fatalf("%d connections, want the first kept open", fs.accepted.Load())
	}
}

func TestFakeOtherErrors(t *testing.T) {
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	fc := fs.next(t)
	for _, tc := range []struct {
		reason wire.Reason
		want   error
	}{
		{wire.ReasonTokenExhausted, ErrTokenExhausted},
		{wire.ReasonBadKey, ErrBadKey},
		{wire.ReasonBadRange, nil},
		{wire.ReasonBadOwner, nil},
		{wire.ReasonInternal, nil},
		{"some_future_reason", nil},
	} {
		ch := acquireAsync(cl, context.Background(), "e", 0, AcquireOptions{})
		a := fc.expect(t, wire.OpAcquire)
		fc.send(t, errResp(a.Owner, tc.reason))
		r := wait(t, ch, clustertest.Bound)
		var se *ServerError
		if !errors.As(r.err, &se) || se.Reason != tc.reason || (tc.want != nil && !errors.Is(r.err, tc.want)) {
			t.Fatalf("E %s: %v", tc.reason, r.err)
		}
		if errors.Is(r.err, ErrIndeterminate) || errors.Is(r.err, ErrTimeout) {
			t.Fatalf("E %s: %v matches a result it must not", tc.reason, r.err)
		}
	}
}

func TestFakeOwnerWrapFailsClosed(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, FirstOwner: math.MaxUint64 - 1})
	fc := fs.next(t)
	var tickets []*Ticket
	for i, want := range []uint64{math.MaxUint64 - 1, math.MaxUint64} {
		ch := acquireAsync(cl, context.Background(), "w", 0, AcquireOptions{})
		a := fc.expect(t, wire.OpAcquire)
		if a.Owner != want {
			t.Fatalf("owner %d, want %d", a.Owner, want)
		}
		fc.send(t, granted(a.Owner, uint64(i+1)))
		r := wait(t, ch, clustertest.Bound)
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		tickets = append(tickets, r.t)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := cl.Acquire(ctx, "w", 0, AcquireOptions{}); !errors.Is(err, ErrOwnerExhausted) {
			t.Fatalf("Acquire after the wrap: %v", err)
		}
		if err := tickets[0].Release(ctx); !errors.Is(err, ErrOwnerExhausted) {
			t.Fatalf("Release after the wrap: %v", err)
		}
		if err := cl.Ping(ctx); !errors.Is(err, ErrOwnerExhausted) {
			t.Fatalf("Ping after the wrap: %v", err)
		}
	}
	clk.Advance(time.Hour) // health pings would need owners too
	fc.silent(t, 200*time.Millisecond)
	if !cl.Stats().OwnerExhausted {
		t.Fatal("Stats.OwnerExhausted false")
	}
}

func TestFakeOutOfOrderAnswers(t *testing.T) {
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	fc := fs.next(t)
	keys := []string{"o0", "o1", "o2", "o3"}
	chans := map[string]<-chan result{}
	for _, k := range keys {
		chans[k] = acquireAsync(cl, context.Background(), k, 0, AcquireOptions{Wait: time.Minute})
	}
	var reqs []wire.Request
	for range keys {
		reqs = append(reqs, fc.expect(t, wire.OpAcquire))
	}
	// Answer in reverse order, with an answer for an unknown owner first.
	resps := []wire.Response{granted(999_999, 1)}
	for i := len(reqs) - 1; i >= 0; i-- {
		resps = append(resps, granted(reqs[i].Owner, 100+uint64(reqs[i].Key[1]-'0')))
	}
	fc.send(t, resps...)
	for i, k := range keys {
		r := wait(t, chans[k], clustertest.Bound)
		if r.err != nil || r.t.Token != 100+uint64(i) || r.t.Key != k {
			t.Fatalf("%s: %+v %v", k, r.t, r.err)
		}
	}
	if st := cl.Stats(); st.UnknownResponses != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFakeProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp func(owner uint64) wire.Response
	}{
		{"server closes (E with owner 0)", func(uint64) wire.Response { return errResp(0, wire.ReasonBadRequest) }},
		{"grant with token 0", func(o uint64) wire.Response { return granted(o, 0) }},
		{"grant above the largest token", func(o uint64) wire.Response { return granted(o, wire.MaxToken+1) }},
		{"release answer to an acquire", func(o uint64) wire.Response { return short(wire.OpRelease, o) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeServer(t)
			cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
			ch := acquireAsync(cl, context.Background(), "p", 0, AcquireOptions{Wait: time.Minute})
			fc := fs.next(t)
			a := fc.expect(t, wire.OpAcquire)
			fc.send(t, tc.resp(a.Owner))
			if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrIndeterminate) {
				t.Fatalf("Acquire: %v, want ErrIndeterminate", r.err)
			}
			fc.closed(t, clustertest.Bound)
		})
	}
}

func TestFakeCancel(t *testing.T) {
	t.Parallel() // waits in real time
	t.Run("queued: nothing sent", func(t *testing.T) {
		gate := make(chan struct{})
		fs := newFakeServer(t, withGate(gate))
		cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
		ctx, cancel := context.WithCancel(context.Background())
		ch := acquireAsync(cl, ctx, "c", 0, AcquireOptions{Wait: time.Minute})
		eventually(t, clustertest.Bound, "queued", func() bool { return cl.Stats().Queued == 1 })
		cancel()
		r := wait(t, ch, clustertest.Bound)
		if !errors.Is(r.err, ErrCanceled) || !errors.Is(r.err, context.Canceled) || errors.Is(r.err, ErrIndeterminate) {
			t.Fatalf("Acquire: %v, want ErrCanceled", r.err)
		}
		close(gate)
		fs.next(t).silent(t, 200*time.Millisecond)
	})
	t.Run("sent: indeterminate, connection closed", func(t *testing.T) {
		fs := newFakeServer(t)
		cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
		ctx, cancel := context.WithCancel(context.Background())
		ch := acquireAsync(cl, ctx, "c", 0, AcquireOptions{Wait: time.Minute})
		fc := fs.next(t)
		fc.expect(t, wire.OpAcquire)
		cancel()
		if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrIndeterminate) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Acquire: %v, want ErrIndeterminate", r.err)
		}
		fc.closed(t, clustertest.Bound)
	})
	t.Run("context deadline shortens the wait", func(t *testing.T) {
		fs := newFakeServer(t)
		cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
		fc := fs.next(t) // connected first, so the stamp is taken right after the call
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		ch := acquireAsync(cl, ctx, "c", 0, AcquireOptions{Wait: time.Minute})
		a := fc.expect(t, wire.OpAcquire)
		if a.Wait != 2 && a.Wait != 1 { // 2 unless the write was over 0.5 s late
			t.Fatalf("stamped %d, want 2 (1.5 s left, rounded up)", a.Wait)
		}
		// The server's T comes within the grace after the context's deadline.
		time.Sleep(1600 * time.Millisecond)
		fc.send(t, short(wire.OpTimeout, a.Owner))
		if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrTimeout) {
			t.Fatalf("Acquire: %v, want ErrTimeout", r.err)
		}
	})
}

func TestContextDeadlineWhileQueued(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	fs := newFakeServer(t, withGate(gate))
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := cl.Acquire(ctx, "d", 0, AcquireOptions{Wait: time.Minute})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "guaranteed unsent") {
		t.Fatalf("Acquire: %v, want ErrTimeout (guaranteed unsent) and DeadlineExceeded", err)
	}
	if _, err := cl.Acquire(ctx, "d", 0, AcquireOptions{}); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with an expired context: %v", err)
	}
}

func TestFakeUnsentAtDeadline(t *testing.T) {
	t.Parallel() // waits in real time
	for _, w := range []time.Duration{0, 2 * time.Second} {
		t.Run(w.String(), func(t *testing.T) {
			gate := make(chan struct{})
			fs := newFakeServer(t, withGate(gate))
			clk := newFakeClock()
			cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, QueueSize: 1})
			ch := acquireAsync(cl, context.Background(), "q", 0, AcquireOptions{Wait: w})
			eventually(t, clustertest.Bound, "queued", func() bool { return cl.Stats().Queued == 1 })
			if _, err := cl.Acquire(context.Background(), "q2", 0, AcquireOptions{}); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("second Acquire: %v, want ErrQueueFull", err)
			}
			if err := cl.Ping(context.Background()); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("Ping: %v, want ErrQueueFull", err)
			}
			bound := w
			if w == 0 {
				bound = IOTimeout
			}
			clk.Advance(bound - time.Nanosecond)
			pending(t, ch, 50*time.Millisecond)
			clk.Advance(time.Nanosecond)
			r := wait(t, ch, 10*time.Second)
			if !errors.Is(r.err, ErrTimeout) || !strings.Contains(r.err.Error(), "guaranteed unsent") {
				t.Fatalf("Acquire: %v, want ErrTimeout (guaranteed unsent)", r.err)
			}
			close(gate)
			fs.next(t).silent(t, 200*time.Millisecond)
		})
	}
}

func TestFakeHealthPing(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, PingInterval: 10 * time.Second, Logger: testLogger(t)})
	fc := fs.next(t)
	start := clk.Now()
	tick := func(n int) {
		t.Helper()
		eventually(t, clustertest.Bound, "ping timer armed", func() bool {
			return clk.HasTimerAt(start.Add(time.Duration(n) * 10 * time.Second))
		})
		clk.Advance(start.Add(time.Duration(n) * 10 * time.Second).Sub(clk.Now()))
	}
	tick(1)
	p := fc.expect(t, wire.OpPing)
	fc.send(t, short(wire.OpPing, p.Owner))
	eventually(t, clustertest.Bound, "pong read", func() bool {
		cl.pmu.Lock()
		defer cl.pmu.Unlock()
		for cn := range cl.conns {
			cn.mu.Lock()
			defer cn.mu.Unlock()
			return !cn.pinging
		}
		return false
	})
	tick(2) // something was read since the last tick: no ping
	fc.silent(t, 100*time.Millisecond)
	tick(3)
	fc.expect(t, wire.OpPing) // not answered
	clk.Advance(IOTimeout)
	fc.closed(t, clustertest.Bound)
	fs.next(t) // replaced
	eventually(t, clustertest.Bound, "reconnect counted", func() bool { return cl.Stats().Reconnects == 1 })
}

func TestFakeClose(t *testing.T) {
	fs := newFakeServer(t)
	cl, err := New(Config{Servers: []string{fs.addr}, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(cl, context.Background(), "x", 0, AcquireOptions{Wait: time.Minute})
	fc := fs.next(t)
	fc.expect(t, wire.OpAcquire)
	cl.Close()
	if r := wait(t, ch, clustertest.Bound); !errors.Is(r.err, ErrIndeterminate) {
		t.Fatalf("in-flight Acquire at Close: %v, want ErrIndeterminate", r.err)
	}
	fc.closed(t, clustertest.Bound)
	ctx := context.Background()
	if _, err := cl.Acquire(ctx, "x", 0, AcquireOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := cl.Release(ctx, "x", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close: %v", err)
	}
	if err := cl.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
	cl.Close() // twice is fine
}

// A server that answers the hello with E unavailable refused the connection (its connection
// limit): the error says so, not "no leader".
func TestFakeHelloRefusedSaysConnectionLimit(t *testing.T) {
	fs := newFakeServer(t, withHelloError(wire.ReasonUnavailable))
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	_, err := cl.Acquire(context.Background(), "k", 0, AcquireOptions{Wait: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "connection limit (--max-conns)") || strings.Contains(err.Error(), "no leader") {
		t.Fatalf("Acquire: %v, want an error about the connection limit", err)
	}
	var se *ServerError
	if !errors.Is(refusedError{}, ErrUnavailable) || !errors.As(refusedError{}, &se) || se.Reason != wire.ReasonUnavailable {
		t.Fatal("refusedError is not ErrUnavailable and a ServerError to errors.Is and errors.As")
	}
	t.Logf("Acquire: %v", err)
}
