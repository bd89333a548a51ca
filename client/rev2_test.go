package client

// Protocol revision 2 (docs/protocol.md): the negotiation in the hellos, and grants
// that carry their age. The scripted fake server speaks the revision (withLeases); the real
// server does not offer it yet, so against it the client must stay latch/1.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

func TestRev2Negotiation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []fakeOption
		latch1Only bool
		secret     []byte
		offer      uint8 // the client's hello flags
		revised    bool  // revision 2 in force
	}{
		{"offer echoed", []fakeOption{withLeases()}, false, nil, wire.FlagLeases, true},
		{"offer echoed, with auth", []fakeOption{withLeases(), withFakeSecret(secretOne)}, false, secretOne, wire.FlagLeases, true},
		{"offer not echoed (a latch/1 server)", nil, false, nil, wire.FlagLeases, false},
		{"offer not echoed, with auth", []fakeOption{withFakeSecret(secretOne)}, false, secretOne, wire.FlagLeases, false},
		{"Latch1Only: nothing offered, nothing echoed", []fakeOption{withLeases()}, true, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			fs := newFakeServer(t, tc.opts...)
			cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, Secret: tc.secret, Latch1Only: tc.latch1Only})
			fc := fs.next(t)
			if fc.clientHello.Hello.Flags != tc.offer {
				t.Fatalf("client hello flags 0x%02x, want 0x%02x", fc.clientHello.Hello.Flags, tc.offer)
			}
			if fc.leases != tc.revised {
				t.Fatalf("fake server: revision in force %v, want %v", fc.leases, tc.revised)
			}
			eventually(t, clustertest.Bound, "connection counted", func() bool { return cl.Stats().ConnsOpen == 1 })
			if n := cl.Stats().ConnsRevised; n != map[bool]int{false: 0, true: 1}[tc.revised] {
				t.Fatalf("Stats.ConnsRevised %d, revised %v", n, tc.revised)
			}
			start := clk.Now()
			ch := acquireAsync(cl, context.Background(), "neg", 0, AcquireOptions{Wait: 5 * time.Second})
			a := fc.expect(t, wire.OpAcquire)
			clk.Advance(time.Second)
			want := start.Add(30 * time.Second) // latch/1: written_at + lease, no margin
			if tc.revised {
				fc.send(t, grantedAge(a.Owner, 8, 400))
				want = start.Add(shrink(30400*time.Millisecond, rhoPPB(DefaultRho)))
			} else {
				fc.send(t, granted(a.Owner, 8))
			}
			r := wait(t, ch, clustertest.Bound)
			if r.err != nil || r.t.Token != 8 {
				t.Fatalf("Acquire: %v", r.err)
			}
			if !r.t.Deadline.Equal(want) {
				t.Fatalf("deadline written_at + %v, want + %v", r.t.Deadline.Sub(start), want.Sub(start))
			}
		})
	}
}

// A server whose hello echoes an offer the client did not make breaks the handshake: the
// client drops the connection at once and sends nothing on it, and the call says why.
func TestRev2EchoNotOfferedIsAHandshakeError(t *testing.T) {
	fs := newFakeServer(t, withEcho(wire.FlagLeases))
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Latch1Only: true})
	fc := fs.next(t)
	if fc.clientHello.Hello.Flags != 0 {
		t.Fatalf("client hello flags 0x%02x, want 0", fc.clientHello.Hello.Flags)
	}
	fc.closed(t, clustertest.Bound)
	_, err := cl.Acquire(context.Background(), "k", 0, AcquireOptions{Wait: 300 * time.Millisecond})
	unreachable(t, "Acquire", err, "did not offer")
	if errors.Is(err, ErrAuth) {
		t.Fatalf("Acquire: %v: an echo not offered is a broken server, not an authentication failure", err)
	}
	if st := cl.Stats(); st.DialFailures == 0 || st.Connects != 0 {
		t.Fatalf("stats %+v: want failed handshakes and no connection", st)
	}
}

// Ages on a revised connection, with the deadline computed exactly on the fake clock:
// written_at + (min(age, read_at - written_at) + lease) x (1 - rho), rounded down.
func TestRev2GrantAges(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	for _, tc := range []struct {
		name    string
		rho     float64
		wait    time.Duration
		lease   time.Duration
		budget  time.Duration
		elapsed time.Duration // from the write to the read of the G
		age     uint32
		want    time.Duration // deadline - written_at
	}{
		{"age 0", 0, 5 * s, 30 * s, 0, 20 * ms, 0, 29970 * ms},
		{"age 1.5 s", 0, 5 * s, 30 * s, 0, 2 * s, 1500, 31468500 * time.Microsecond},
		// The draft's example: latch/1 would hand out nothing (the deadline has passed).
		{"waiter granted after 50 s keeps its lease", 0, 60 * s, 30 * s, 29 * s, 50020 * ms, 50000, 79920 * ms},
		{"large age at the longest wait", 0, 255 * s, time.Hour, 250 * s, 254950 * ms, 254_900, 3851*s + 45_100*time.Microsecond},
		{"bogus age above what the client saw is capped", 0, 5 * s, 30 * s, 0, 20 * ms, 3_600_000, 29989980 * time.Microsecond},
		{"the largest age is capped", 0, 5 * s, 30 * s, 0, 20 * ms, wire.MaxAge, 29989980 * time.Microsecond},
		{"rho 1%", 0.01, 5 * s, 30 * s, 0, 2 * s, 1000, 30690 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			fs := newFakeServer(t, withLeases())
			cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, Rho: tc.rho, PingInterval: time.Hour})
			fc := fs.next(t)
			start := clk.Now()
			ch := acquireAsync(cl, context.Background(), "age", tc.budget, AcquireOptions{Wait: tc.wait, Lease: tc.lease})
			a := fc.expect(t, wire.OpAcquire)
			clk.Advance(tc.elapsed)
			fc.send(t, grantedAge(a.Owner, 5, tc.age))
			r := wait(t, ch, clustertest.Bound)
			if r.err != nil {
				t.Fatalf("Acquire: %v", r.err)
			}
			if d := r.t.Deadline.Sub(start); d != tc.want {
				t.Fatalf("deadline written_at + %v, want + %v", d, tc.want)
			}
			if left := r.t.Remaining(); left != tc.want-tc.elapsed {
				t.Fatalf("Remaining %v, want %v", left, tc.want-tc.elapsed)
			}
			// The gate, Deadline and Context all use it.
			ctx := r.t.Context()
			if dl, ok := ctx.Deadline(); !ok || !dl.Equal(r.t.Deadline) {
				t.Fatalf("Context().Deadline() = %v %v, want %v", dl, ok, r.t.Deadline)
			}
			clk.Advance(tc.want - tc.elapsed - time.Nanosecond)
			select {
			case <-ctx.Done():
				t.Fatal("ticket context done before its deadline")
			case <-time.After(50 * time.Millisecond):
			}
			clk.Advance(time.Nanosecond)
			doneWithin(t, ctx, clustertest.Bound, "ticket context not done at its deadline")
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err %v, want DeadlineExceeded", ctx.Err())
			}
		})
	}
}

// The gate counts the age: one nanosecond less lease left than the budget is not handed out.
func TestRev2GateWithAge(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeServer(t, withLeases())
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1, Clock: clk, PingInterval: time.Hour})
	fc := fs.next(t)
	// Wait 60 s, lease 30 s, G with age 50 s read 50.92 s after the write: 79.92 s - 50.92 s
	// = 29 s left, exactly the budget; a nanosecond later it is not enough.
	for _, tc := range []struct {
		budget time.Duration
		late   time.Duration
		ok     bool
	}{{29 * time.Second, 900 * time.Millisecond, true}, {29 * time.Second, 900*time.Millisecond + 1, false}} {
		ch := acquireAsync(cl, context.Background(), "gate", tc.budget, AcquireOptions{Wait: time.Minute})
		a := fc.expect(t, wire.OpAcquire)
		clk.Advance(50020*time.Millisecond + tc.late)
		fc.send(t, grantedAge(a.Owner, 40, 50000))
		r := wait(t, ch, clustertest.Bound)
		if tc.ok {
			if r.err != nil || r.t.Remaining() != tc.budget {
				t.Fatalf("Acquire: %v, want a ticket with exactly the budget left", r.err)
			}
			continue
		}
		if !errors.Is(r.err, ErrIndeterminate) || !strings.Contains(r.err.Error(), "budget") {
			t.Fatalf("Acquire: %v, want ErrIndeterminate (budget)", r.err)
		}
		rel := fc.expect(t, wire.OpRelease) // the compensating release, on the revised connection
		if rel.Token != 40 {
			t.Fatalf("compensation %+v", rel)
		}
		fc.send(t, short(wire.OpRelease, rel.Owner))
	}
}

func TestRev2ProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leases bool
		resp   func(owner uint64) wire.Response
	}{
		{"A on a revised connection", true, func(o uint64) wire.Response { return granted(o, 3) }},
		{"G with token 0", true, func(o uint64) wire.Response { return grantedAge(o, 0, 1) }},
		{"G above the largest token", true, func(o uint64) wire.Response { return grantedAge(o, wire.MaxToken+1, 1) }},
		{"L (extended) answering an acquire", true, func(o uint64) wire.Response { return short(wire.OpExtend, o) }},
		{"G on a latch/1 connection", false, func(o uint64) wire.Response { return grantedAge(o, 3, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []fakeOption
			if tc.leases {
				opts = append(opts, withLeases())
			}
			fs := newFakeServer(t, opts...)
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

// A real server echoes the offer: the ticket's deadline carries the margin of rho (the fake
// clock stands still, so the age counts for nothing: the client never counts more of it than
// it saw pass), extends and keep-alives work, and the proxy, which decodes requests with the
// revision the hello offered, sees the extend as an L.
func TestRealServerEchoesTheOffer(t *testing.T) {
	rs := startReal(t, nil)
	p := newProxy(t, rs.addr, nil)
	clk := newFakeClock()
	cl := newTestClient(t, Config{Servers: []string{p.addr}, Conns: 1, Clock: clk})
	ctx := context.Background()
	start := clk.Now()
	tk, err := cl.Acquire(ctx, "offer", 0, AcquireOptions{Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if want := start.Add(9990 * time.Millisecond); !tk.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want written_at + (0 + lease) x (1 - 0.001) = %v", tk.Deadline, want)
	}
	clk.Advance(2 * time.Second)
	if err := tk.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if want := start.Add(2*time.Second + 59940*time.Millisecond); !tk.CurrentDeadline().Equal(want) {
		t.Fatalf("deadline after the extend %v, want its written_at + 60 s x 0.999 = %v", tk.CurrentDeadline(), want)
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if st := cl.Stats(); st.ConnsOpen != 1 || st.ConnsRevised != 1 {
		t.Fatalf("stats %+v: want one revised connection", st)
	}
	ls := p.requests(wire.OpExtend)
	if len(ls) != 1 || ls[0].Token != tk.Token || ls[0].Lease != 60 || string(ls[0].Key) != "offer" {
		t.Fatalf("extends %+v: want one L for token %d, lease 60 s", ls, tk.Token)
	}
}

// A client that does not offer the revision gets latch/1 from the same server: the deadline
// is written_at + lease, and an extend fails at once, with nothing sent.
func TestRealServerLatch1Client(t *testing.T) {
	rs := startReal(t, nil)
	p := newProxy(t, rs.addr, nil)
	clk := newFakeClock()
	cl := newTestClient(t, Config{Servers: []string{p.addr}, Conns: 1, Clock: clk, Latch1Only: true})
	ctx := context.Background()
	start := clk.Now()
	tk, err := cl.Acquire(ctx, "offer", 0, AcquireOptions{Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if want := start.Add(10 * time.Second); !tk.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want latch/1's written_at + lease %v", tk.Deadline, want)
	}
	if err := tk.Extend(ctx, time.Minute); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Extend: %v, want ErrUnsupported", err)
	}
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	eventually(t, clustertest.Bound, "ping recorded", func() bool { return len(p.requests(wire.OpPing)) == 1 })
	if err := tk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if st := cl.Stats(); st.ConnsOpen != 1 || st.ConnsRevised != 0 {
		t.Fatalf("stats %+v: want one latch/1 connection", st)
	}
	hellos := p.requests(wire.OpHello)
	if len(hellos) != 1 || hellos[0].Hello.Flags != 0 {
		t.Fatalf("hellos %+v: want one, with flags 0", hellos)
	}
	if len(p.requests(wire.OpExtend)) != 0 {
		t.Fatal("an extend was sent on a latch/1 connection")
	}
}

// answerAll answers every request on fc at once until the connection ends: acquires with a
// grant (G with an age on a revised connection, else A), releases R, pings, extends L.
func answerAll(fc *fakeConn) {
	defer fc.nc.Close()
	var token uint64
	for {
		r, err := fc.read(time.Minute)
		if err != nil {
			return
		}
		resp := short(r.Op, r.Owner) // R, P, L
		if r.Op == wire.OpAcquire {
			token++
			resp = granted(r.Owner, token)
			if fc.leases {
				resp = grantedAge(r.Owner, token, 3)
			}
		}
		if fc.sendErr(resp) != nil {
			return
		}
	}
}

// BenchmarkFakeAcquireRelease measures acquire+release pairs against the fake server that
// answers everything at once, on latch/1 (A grants) and on revision 2 (G grants with an age):
// the same server work, so the difference is the client's cost of the age.
func BenchmarkFakeAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []fakeOption
	}{{"latch1", nil}, {"revised", []fakeOption{withLeases()}}} {
		b.Run(tc.name, func(b *testing.B) {
			fs := newFakeServer(b, tc.opts...)
			go func() {
				for {
					select {
					case fc := <-fs.conns:
						go answerAll(fc)
					case <-fs.done:
						return
					}
				}
			}()
			cl, err := New(Config{Servers: []string{fs.addr}, Conns: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tk, err := cl.Acquire(ctx, "bench", 0, AcquireOptions{})
					if err != nil {
						b.Error(err)
						return
					}
					if err := tk.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if st := cl.Stats(); (st.ConnsRevised > 0) != (tc.opts != nil) || st.ConnsRevised > 0 && st.ConnsRevised != st.ConnsOpen {
				b.Fatalf("stats %+v: want every connection revised %v", st, tc.opts != nil)
			}
		})
	}
}

// A latch/1 connection of a client that offers revision 2 is retired after a while, so the
// slot dials again and meets a server that serves the revision now (here: the next server of
// the list, which always did); its calls are answered first, none is lost.
func TestLatch1ConnectionsAskAgain(t *testing.T) {
	old := renegotiateAfter
	renegotiateAfter = 200 * time.Millisecond
	t.Cleanup(func() { renegotiateAfter = old })
	fs := newFakeServer(t)
	rs := startReal(t, nil)
	cl := newTestClient(t, Config{Servers: []string{fs.addr, rs.addr}, Conns: 1})
	fc := fs.next(t)
	ch := acquireAsync(cl, context.Background(), "again", 0, AcquireOptions{Wait: time.Minute})
	a := fc.expect(t, wire.OpAcquire)
	time.Sleep(500 * time.Millisecond) // past the retirement: the acquire is still pending
	fc.send(t, granted(a.Owner, 5))
	r := wait(t, ch, clustertest.Bound)
	if r.err != nil || r.t.Token != 5 {
		t.Fatalf("the pending acquire on the retired connection: %v", r.err)
	}
	fc.closed(t, clustertest.Bound)
	eventually(t, clustertest.Bound, "a revised connection", func() bool { return cl.Stats().ConnsRevised == 1 })
	tk, err := cl.Acquire(context.Background(), "again2", 0, AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire on the new connection: %v", err)
	}
	if err := tk.Extend(context.Background(), time.Minute); err != nil {
		t.Fatalf("Extend on the revised connection: %v", err)
	}
}
