package cluster_test

import (
	"testing"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// The acquire path of a whole single-mode server, session included: a raw connection sends
// an acquire, reads the grant, sends the release and reads R, on latch/1 (the grant is A) and
// on revision 2 (the session encodes it as G, with the age the node counted). The two must
// cost the same allocations: grant age adds none to the server's acquire path.

// rawPair drives acquire+release pairs of one key on a raw connection, reusing its frames.
type rawPair struct {
	c   *wiretest.Conn
	acq []byte
	rel wire.Request
	buf []byte
	// grant is the op the server's grants must carry (A on latch/1, G on revision 2).
	grant wire.Op
}

// dialPair connects to addr and makes the hello, offering revision 2 when leases is set.
func dialPair(t testing.TB, addr, key string, leases bool) *rawPair {
	t.Helper()
	c := wiretest.Dial(t, addr)
	p := &rawPair{c: c, acq: wiretest.Acquire(1, 0, 30, key), grant: wire.OpAcquire,
		rel: wire.Request{Op: wire.OpRelease, Owner: 2, Key: []byte(key)}, buf: make([]byte, 0, wire.MaxFrame)}
	if !leases {
		c.Hello(t, nil)
		return p
	}
	nonce, err := wire.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	c.Send(t, wiretest.Hello(wire.Version, wire.FlagLeases, nonce))
	h := c.Next(t)
	revs, err := wire.AcceptFlags(wire.FlagLeases, h.Hello.Flags)
	if h.Op != wire.OpHello || err != nil || revs != wire.FlagLeases {
		t.Fatalf("hello offering revision 2 answered %s (%v): want the offer echoed", wiretest.Describe(h), err)
	}
	c.SetFlags(revs)
	p.grant = wire.OpGranted
	return p
}

// once makes one pair; it returns the first answer that was not what it should be (op 0:
// none), so the caller can fail the test outside a measured function.
func (p *rawPair) once() wire.Response {
	if err := p.c.Write(p.acq, wiretest.WriteTimeout); err != nil {
		return wire.Response{Op: wire.OpError, Reason: wire.Reason(err.Error())}
	}
	g, err := p.c.TryNext(wiretest.ReadTimeout)
	if err != nil || g.Op != p.grant {
		return g
	}
	p.rel.Token = g.Token
	p.buf = wire.AppendRequest(p.buf[:0], &p.rel)
	if err := p.c.Write(p.buf, wiretest.WriteTimeout); err != nil {
		return wire.Response{Op: wire.OpError, Reason: wire.Reason(err.Error())}
	}
	r, err := p.c.TryNext(wiretest.ReadTimeout)
	if err != nil || r.Op != wire.OpRelease {
		return r
	}
	return wire.Response{}
}

func TestSessionGrantAgeAddsNoAllocation(t *testing.T) {
	ts := servertest.Start(t, cluster.DefaultConfig(), server.Config{})
	measure := func(p *rawPair) float64 {
		var bad wire.Response
		allocs := testing.AllocsPerRun(2000, func() {
			if r := p.once(); r.Op != 0 && bad.Op == 0 {
				bad = r
			}
		})
		if bad.Op != 0 {
			t.Fatalf("a pair was answered %s, want %s then R", wiretest.Describe(bad), p.grant)
		}
		return allocs
	}
	latch1 := measure(dialPair(t, ts.Addr, "alloc/latch1", false))
	revised := measure(dialPair(t, ts.Addr, "alloc/revised", true))
	t.Logf("allocations per acquire+release through the server: %.1f on latch/1 (A), %.1f on revision 2 (G with its age)", latch1, revised)
	if revised != latch1 {
		t.Fatalf("%.1f allocations per pair on revision 2, %.1f on latch/1: grant age must add none", revised, latch1)
	}
}

// BenchmarkSessionAcquireRelease: one connection's acquire+release round trips through a
// single-mode server, on latch/1 and on revision 2; allocs/op covers the server and the raw
// client (which allocates nothing).
func BenchmarkSessionAcquireRelease(b *testing.B) {
	ts := servertest.Start(b, cluster.DefaultConfig(), server.Config{})
	for _, tc := range []struct {
		name   string
		leases bool
	}{{"latch1", false}, {"revised", true}} {
		b.Run(tc.name, func(b *testing.B) {
			p := dialPair(b, ts.Addr, "bench/"+tc.name, tc.leases)
			b.ReportAllocs()
			for b.Loop() {
				if r := p.once(); r.Op != 0 {
					b.Fatalf("a pair was answered %s, want %s then R", wiretest.Describe(r), p.grant)
				}
			}
		})
	}
}
