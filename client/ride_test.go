package client

// The client rides through elections: E unavailable, refused dials and failed handshakes are
// retried with backoff across every server until the call's own deadline, and a call that no
// server took says so (ErrUnavailable as well as ErrTimeout) and names the servers.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// electing answers every request on every connection of its fake servers with E unavailable
// until it is told a leader exists (elected), then grants acquires (token 7), releases (R)
// and pings. It records every attempt.
type electing struct {
	leader   atomic.Bool
	refused  atomic.Int32 // E unavailable answers
	mu       sync.Mutex
	owners   map[uint64]int // attempts per owner
	servers  map[string]int // attempts per server
	lastWait uint8
}

func newElecting(t *testing.T, fss ...*fakeServer) *electing {
	e := &electing{owners: map[uint64]int{}, servers: map[string]int{}}
	for _, fs := range fss {
		go func() {
			for {
				select {
				case fc := <-fs.conns:
					go e.serve(fs.addr, fc)
				case <-fs.done:
					return
				}
			}
		}()
	}
	return e
}

func (e *electing) serve(addr string, fc *fakeConn) {
	for {
		r, err := fc.read(time.Minute)
		if err != nil {
			fc.nc.Close()
			return
		}
		if r.Op == wire.OpPing {
			fc.sendErr(short(wire.OpPing, r.Owner))
			continue
		}
		e.mu.Lock()
		e.owners[r.Owner]++
		e.servers[addr]++
		e.lastWait = r.Wait
		e.mu.Unlock()
		switch {
		case !e.leader.Load():
			e.refused.Add(1)
			fc.sendErr(errResp(r.Owner, wire.ReasonUnavailable))
		case r.Op == wire.OpAcquire:
			fc.sendErr(granted(r.Owner, 7))
		default:
			fc.sendErr(short(wire.OpRelease, r.Owner))
		}
	}
}

// elect lets the fake servers serve d after they refused refusals attempts in all.
func (e *electing) elect(t *testing.T, refusals int32, d time.Duration) {
	t.Helper()
	eventually(t, clustertest.Bound, "servers refused", func() bool { return e.refused.Load() >= refusals })
	time.Sleep(d)
	e.leader.Store(true)
}

func TestRideUnavailableUntilALeader(t *testing.T) {
	for _, w := range []time.Duration{0, 10 * time.Second} {
		t.Run(w.String(), func(t *testing.T) {
			fs1, fs2 := newFakeServer(t), newFakeServer(t)
			e := newElecting(t, fs1, fs2)
			cl := newTestClient(t, Config{Servers: []string{fs1.addr, fs2.addr}})
			ch := acquireAsync(cl, context.Background(), "ride", 0, AcquireOptions{Wait: w})
			// Both servers refuse, each more than once: the call must ask again the servers
			// that refused it earlier. A wait-0 acquire has 5 s for all of it.
			pause := time.Second
			if w == 0 {
				pause = 300 * time.Millisecond
			}
			e.elect(t, 4, pause)
			r := wait(t, ch, clustertest.Bound)
			if r.err != nil || r.t.Token != 7 {
				t.Fatalf("Acquire through an election: %v", r.err)
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if len(e.owners) != 1 {
				t.Fatalf("attempts by owner %v: want one owner for every attempt", e.owners)
			}
			if e.servers[fs1.addr] < 2 || e.servers[fs2.addr] < 2 { // the first attempt at each was refused
				t.Fatalf("attempts by server %v: want each asked again after refusing", e.servers)
			}
			if w > 0 && (e.lastWait == 0 || e.lastWait >= 10) {
				t.Fatalf("last stamped wait %d: want the time left of the 10 s", e.lastWait)
			}
			if w == 0 && e.lastWait != 0 {
				t.Fatalf("last stamped wait %d: a wait-0 acquire stays wait 0", e.lastWait)
			}
		})
	}
}

func TestRideReleaseRetriedWithinItsBound(t *testing.T) {
	fs := newFakeServer(t)
	e := newElecting(t, fs)
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	done := releaseAsync(cl, context.Background(), "rel", 12)
	e.elect(t, 3, time.Second)
	if err := waitErr(t, done, clustertest.Bound, "Release through an election"); err != nil {
		t.Fatalf("Release through an election: %v", err)
	}
}

func TestRideDialRefusedThenAccepted(t *testing.T) {
	addr := clustertest.DeadAddr(t)
	cl := newTestClient(t, Config{Servers: []string{addr}, Conns: 1})
	ch := acquireAsync(cl, context.Background(), "dial", 0, AcquireOptions{Wait: 10 * time.Second})
	eventually(t, clustertest.Bound, "dials refused", func() bool { return cl.Stats().DialFailures >= 2 })
	fs := newFakeServer(t, withAddr(addr))
	fc := fs.next(t)
	a := fc.expect(t, wire.OpAcquire)
	fc.send(t, granted(a.Owner, 5))
	if r := wait(t, ch, clustertest.Bound); r.err != nil || r.t.Token != 5 {
		t.Fatalf("Acquire after refused dials: %v", r.err)
	}
}

func TestRideHandshakeFailsThenSucceeds(t *testing.T) {
	fs := newFakeServer(t, withFailedHandshakes(3))
	cl := newTestClient(t, Config{Servers: []string{fs.addr}, Conns: 1})
	ch := acquireAsync(cl, context.Background(), "hs", 0, AcquireOptions{Wait: 10 * time.Second})
	fc := fs.next(t)
	a := fc.expect(t, wire.OpAcquire)
	fc.send(t, granted(a.Owner, 6))
	if r := wait(t, ch, clustertest.Bound); r.err != nil || r.t.Token != 6 {
		t.Fatalf("Acquire after failed handshakes: %v", r.err)
	}
	if n := fs.accepted.Load(); n < 4 {
		t.Fatalf("%d connections accepted, want 3 failed handshakes and a good one", n)
	}
}

// unreachable checks err is the definite "no server answered" naming want.
func unreachable(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrTimeout) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("%s: %v, want ErrUnavailable and ErrTimeout, not ErrIndeterminate", what, err)
	}
	for _, w := range append(want, "no server answered") {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: %q does not say %q", what, err, w)
		}
	}
}

func TestRideNoServerAnswered(t *testing.T) {
	t.Parallel() // waits in real time
	dead, webAddr := clustertest.DeadAddr(t), clustertest.NonLatchAddr(t)
	fs := newFakeServer(t)
	newElecting(t, fs) // refuses for ever

	cl := newTestClient(t, Config{Servers: []string{dead, webAddr, fs.addr}})
	ctx := context.Background()
	_, err := cl.Acquire(ctx, "down", 0, AcquireOptions{Wait: 2 * time.Second})
	unreachable(t, "Acquire", err, dead, "connection refused", webAddr, "not a latch server", fs.addr+" answered E unavailable")
	unreachable(t, "Release", cl.Release(ctx, "down", 3), dead, fs.addr)
	if st := cl.Stats(); st.Unavailable != 2 || st.Timeouts != 0 {
		t.Fatalf("stats %+v: want the acquire and the release counted as unavailable", st)
	}
	// A ping is answered by any latch server, leader or not: without one, nothing answers.
	down := newTestClient(t, Config{Servers: []string{dead, webAddr}})
	unreachable(t, "Ping", down.Ping(ctx), dead, webAddr, "not a latch server")
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = cl.Acquire(short, "down", 0, AcquireOptions{Wait: time.Minute})
	unreachable(t, "Acquire bounded by its context", err, "context's deadline")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire bounded by its context: %v, want context.DeadlineExceeded too", err)
	}
}
