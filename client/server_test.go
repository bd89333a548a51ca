package client

// Tests against a real single-mode latch server over TCP on 127.0.0.1.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

func TestRealAcquireReleasePing(t *testing.T) {
	rs := startReal(t, nil)
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx := context.Background()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	before := time.Now()
	tk, err := cl.Acquire(ctx, "jobs/nightly", 5*time.Second, AcquireOptions{Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if tk.Key != "jobs/nightly" || tk.Token == 0 {
		t.Fatalf("ticket %+v", tk)
	}
	// The deadline is reckoned from the write, which is after the call and before now, plus
	// the grant's age (which the client caps by what it saw pass), less the rho margin.
	if tk.Deadline.Before(before.Add(9990*time.Millisecond)) || tk.Deadline.After(time.Now().Add(10*time.Second)) {
		t.Fatalf("deadline %v not within the call's span + lease", tk.Deadline)
	}
	if r := tk.Remaining(); r <= 5*time.Second || r > 10*time.Second {
		t.Fatalf("Remaining %v", r)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := cl.Release(ctx, tk.Key, tk.Token); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if err := tk.Context().Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("ticket context after Release: %v, want Canceled", err)
	}
	st := cl.Stats()
	if st.Acquired != 1 || st.Released != 1 || st.NotHeld != 1 || st.Indeterminate != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRealTimeout(t *testing.T) {
	t.Parallel() // waits in real time
	rs := startReal(t, nil)
	holder := newTestClient(t, Config{Servers: []string{rs.addr}})
	cl := newTestClient(t, Config{Servers: []string{rs.addr}, Conns: 1})
	ctx := context.Background()
	tk, err := holder.Acquire(ctx, "k", 0, AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Run("wait0", func(t *testing.T) {
		start := time.Now()
		_, err := cl.Acquire(ctx, "k", 0, AcquireOptions{})
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Acquire of a held key with wait 0: %v, want ErrTimeout", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("wait 0 took %v", d)
		}
	})
	t.Run("wait1s", func(t *testing.T) {
		// The server's T comes when its wait ends, at or just after the client's deadline:
		// the reply grace makes it a definite ErrTimeout, not Indeterminate.
		start := time.Now()
		_, err := cl.Acquire(ctx, "k", 0, AcquireOptions{Wait: 700 * time.Millisecond})
		d := time.Since(start)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Acquire with wait: %v, want ErrTimeout", err)
		}
		if d < 700*time.Millisecond || d > 700*time.Millisecond+2*ReplyGrace+time.Second {
			t.Fatalf("returned after %v", d)
		}
	})
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	st := cl.Stats()
	if st.Timeouts != 2 || st.Indeterminate != 0 || st.Reconnects != 0 || st.Connects != 1 {
		t.Fatalf("stats %+v: want 2 timeouts on one connection kept open", st)
	}
	tk.Release(ctx)
}

func TestRealBusy(t *testing.T) {
	rs := startReal(t, func(c *cluster.Config) { c.MaxKeys = 2 })
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if _, err := cl.Acquire(ctx, k, 0, AcquireOptions{}); err != nil {
			t.Fatalf("Acquire %s: %v", k, err)
		}
	}
	if _, err := cl.Acquire(ctx, "c", 0, AcquireOptions{Wait: 5 * time.Second}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Acquire over the keys gate: %v, want ErrBusy", err)
	}
	if st := cl.Stats(); st.Busy != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRealFIFOAndTokenOrder(t *testing.T) {
	rs := startReal(t, func(c *cluster.Config) { c.TokenFloor = 1000 })
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx := context.Background()
	first, err := cl.Acquire(ctx, "fifo", 0, AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if first.Token != 1001 {
		t.Fatalf("first token %d, want floor+1 = 1001", first.Token)
	}
	var chans []<-chan result
	for i := range 3 {
		chans = append(chans, acquireAsync(cl, ctx, "fifo", 0, AcquireOptions{Wait: 30 * time.Second}))
		rs.waiters(t, i+1) // queued on the server in this order
	}
	prev := first
	for i, ch := range chans {
		if err := prev.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
		r := wait(t, ch, clustertest.Bound)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		if r.t.Token <= prev.Token {
			t.Fatalf("waiter %d got token %d after %d", i, r.t.Token, prev.Token)
		}
		for _, later := range chans[i+1:] {
			pending(t, later, 50*time.Millisecond) // FIFO: nobody behind it was granted
		}
		prev = r.t
	}
	prev.Release(ctx)

	// Concurrent acquires of distinct keys: all tokens distinct.
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			tk, err := cl.Acquire(ctx, "k/"+string(rune('a'+i%26))+string(rune('a'+i/26)), 0, AcquireOptions{})
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			mu.Lock()
			seen[tk.Token] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(seen) != 50 {
		t.Fatalf("%d distinct tokens for 50 grants", len(seen))
	}
}

func TestRealTokenExhausted(t *testing.T) {
	rs := startReal(t, func(c *cluster.Config) { c.TokenFloor = wire.MaxToken - 1 })
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx := context.Background()
	tk, err := cl.Acquire(ctx, "a", 0, AcquireOptions{})
	if err != nil || tk.Token != wire.MaxToken {
		t.Fatalf("Acquire: %v %v, want the last token", tk, err)
	}
	_, err = cl.Acquire(ctx, "b", 0, AcquireOptions{})
	var se *ServerError
	if !errors.Is(err, ErrTokenExhausted) || !errors.As(err, &se) || se.Reason != wire.ReasonTokenExhausted {
		t.Fatalf("Acquire after the last token: %v, want ErrTokenExhausted", err)
	}
}

func TestRealAuth(t *testing.T) {
	ctx := context.Background()
	secretFile := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(secretFile, append(append(append([]byte{}, secretTwo...), '\n'), secretOne...), 0o600); err != nil {
		t.Fatal(err)
	}
	rotating := startReal(t, nil, secretOne, secretTwo)
	open := startReal(t, nil)
	for i, tc := range []struct {
		name string
		srv  *realServer
		cfg  Config
		want error
	}{
		{"first secret", rotating, Config{Secret: secretOne}, nil},
		{"second secret (rotation)", rotating, Config{Secret: secretTwo}, nil},
		{"secret file, first line used", rotating, Config{SecretFile: secretFile}, nil},
		{"wrong secret", rotating, Config{Secret: secretWrong}, ErrAuth},
		{"no secret for a server that asks", rotating, Config{}, ErrAuth},
		{"downgrade refused", open, Config{Secret: secretOne}, ErrAuth},
		{"no auth both sides", open, Config{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, tc.srv.addr, nil)
			tc.cfg.Servers = []string{p.addr}
			cl := newTestClient(t, tc.cfg)
			start := time.Now()
			_, err := cl.Acquire(ctx, "auth/"+string(rune('a'+i)), 0, AcquireOptions{Wait: 2 * clustertest.Bound, Lease: time.Second}) // a wait past the check below
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Acquire: %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				if d := time.Since(start); d > clustertest.Bound {
					t.Fatalf("auth failure reported after %v; it should not wait for the deadline", d)
				}
				if r := p.requests(wire.OpAcquire, wire.OpRelease, wire.OpPing); len(r) != 0 {
					t.Fatalf("requests reached the server after a failed handshake: %+v", r)
				}
				if err := cl.Ping(ctx); !errors.Is(err, ErrAuth) {
					t.Fatalf("Ping while every server refuses auth: %v", err)
				}
			}
		})
	}
}

func TestRealWaitStamping(t *testing.T) {
	// A request queued locally while the only connection is still blocked in its handshake
	// is stamped with what is left of its wait when it is finally written.
	rs := startReal(t, nil)
	hold := make(chan struct{})
	p := newProxy(t, rs.addr, hold)
	clk := newFakeClock()
	cl := newTestClient(t, Config{Servers: []string{p.addr}, Conns: 1, Clock: clk, Latch1Only: true})
	start := clk.Now()
	ch := acquireAsync(cl, context.Background(), "stamp", 0, AcquireOptions{Wait: 10 * time.Second})
	eventually(t, clustertest.Bound, "request queued", func() bool { return cl.Stats().Queued == 1 })
	clk.Advance(3400 * time.Millisecond)
	close(hold)
	r := wait(t, ch, clustertest.Bound)
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	as := p.requests(wire.OpAcquire)
	if len(as) != 1 || as[0].Wait != 7 || as[0].Lease != 30 || string(as[0].Key) != "stamp" {
		t.Fatalf("frames %+v: want one A stamped with wait 7 (10 s - 3.4 s, rounded up)", as)
	}
	if want := start.Add(3400*time.Millisecond + 30*time.Second); !r.t.Deadline.Equal(want) {
		t.Fatalf("ticket deadline %v, want written_at + lease = %v", r.t.Deadline, want)
	}
}

func TestRealTicketContextEndsAtDeadline(t *testing.T) {
	t.Parallel() // waits in real time
	rs := startReal(t, nil)
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	tk, err := cl.Acquire(context.Background(), "ctx", 0, AcquireOptions{Lease: time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	ctx := tk.Context()
	if dl, ok := ctx.Deadline(); !ok || !dl.Equal(tk.Deadline) {
		t.Fatalf("Context().Deadline() = %v %v, want %v", dl, ok, tk.Deadline)
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	doneWithin(t, child, clustertest.Bound, "ticket context not done")
	if now := time.Now(); now.Before(tk.Deadline) {
		t.Fatalf("ticket context done %v before its deadline", tk.Deadline.Sub(now))
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, child %v; want DeadlineExceeded", ctx.Err(), child.Err())
	}
	if tk.Remaining() != 0 {
		t.Fatalf("Remaining %v after the deadline", tk.Remaining())
	}
}

func TestRealBadInputsSendNothing(t *testing.T) {
	rs := startReal(t, nil)
	p := newProxy(t, rs.addr, nil)
	cl := newTestClient(t, Config{Servers: []string{p.addr}})
	ctx := context.Background()
	long := string(make([]byte, 129))
	for i := range []byte(long) {
		long = long[:i] + "x" + long[i+1:]
	}
	for _, tc := range []struct {
		name   string
		key    string
		budget time.Duration
		o      AcquireOptions
		want   error
	}{
		{"negative wait", "k", 0, AcquireOptions{Wait: -time.Nanosecond}, ErrUnsupportedDuration},
		{"wait 255.1 s rounds to 256", "k", 0, AcquireOptions{Wait: 255*time.Second + 100*time.Millisecond}, ErrUnsupportedDuration},
		{"wait 300 s", "k", 0, AcquireOptions{Wait: 300 * time.Second}, ErrUnsupportedDuration},
		{"lease 3600.001 s", "k", 0, AcquireOptions{Lease: 3600*time.Second + time.Millisecond}, ErrUnsupportedDuration},
		{"negative lease", "k", 0, AcquireOptions{Lease: -time.Second}, ErrUnsupportedDuration},
		{"budget 250.5 s", "k", 250*time.Second + 500*time.Millisecond, AcquireOptions{Lease: time.Hour}, ErrUnsupportedDuration},
		{"negative budget", "k", -1, AcquireOptions{}, ErrUnsupportedDuration},
		{"budget over lease", "k", 31 * time.Second, AcquireOptions{}, ErrInsufficientLease},
		{"budget over rounded lease", "k", 2*time.Second + 1, AcquireOptions{Lease: 1500 * time.Millisecond}, ErrInsufficientLease},
		{"empty key", "", 0, AcquireOptions{}, wire.ErrKeyEmpty},
		{"CR in key", "name\r", 0, AcquireOptions{}, wire.ErrKeyCR},
		{"space in key", "a b", 0, AcquireOptions{}, wire.ErrKeyWhitespace},
		{"LF in key", "a\nA", 0, AcquireOptions{}, wire.ErrKeyWhitespace},
		{"129 bytes", long, 0, AcquireOptions{}, wire.ErrKeyTooLong},
		{"not UTF-8", "\xff", 0, AcquireOptions{}, wire.ErrKeyNotUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.Acquire(ctx, tc.key, tc.budget, tc.o)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Acquire: %v, want %v", err, tc.want)
			}
			if isKeyErr := tc.key != "k"; errors.Is(err, ErrBadKey) != isKeyErr {
				t.Fatalf("error %v: matches ErrBadKey %v, want %v", err, !isKeyErr, isKeyErr)
			}
		})
	}
	if err := cl.Release(ctx, "a\rb", 5); !errors.Is(err, ErrBadKey) || !errors.Is(err, wire.ErrKeyCR) {
		t.Fatalf("Release with CR: %v", err)
	}
	if err := cl.Release(ctx, "k", 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release of token 0: %v", err)
	}
	// Valid inputs at the edges are accepted (and sent).
	if _, err := cl.Acquire(ctx, "edge", 250*time.Second, AcquireOptions{Wait: 254*time.Second + 1, Lease: 3599*time.Second + 1}); err != nil {
		t.Fatalf("Acquire at the edges: %v", err)
	}
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	eventually(t, clustertest.Bound, "ping recorded", func() bool { return len(p.requests(wire.OpPing)) == 1 })
	as := p.requests(wire.OpAcquire, wire.OpRelease)
	if len(as) != 1 || string(as[0].Key) != "edge" || as[0].Wait != 255 || as[0].Lease != 3600 {
		t.Fatalf("frames that reached the server: %+v; want only the valid edge acquire (wait 255, lease 3600)", as)
	}
}

func TestRealShutdownIsUnavailable(t *testing.T) {
	// A waiter that its server drains is answered E unavailable: a definite "not acquired".
	// The client asks again until its wait ends; with the server gone, no server answered.
	rs := startReal(t, nil)
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx := context.Background()
	if _, err := cl.Acquire(ctx, "drain", 0, AcquireOptions{}); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	ch := acquireAsync(cl, ctx, "drain", 0, AcquireOptions{Wait: 3 * time.Second})
	rs.waiters(t, 1)
	rs.stop()
	r := wait(t, ch, clustertest.Bound)
	unreachable(t, "waiter at shutdown", r.err, rs.addr)
}
