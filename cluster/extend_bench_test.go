package cluster_test

import (
	"testing"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// BenchmarkSessionExtend: one connection's extend round trips of a held key through a
// single-mode server (revision 2), beside BenchmarkSessionAcquireRelease's two round trips a
// pair: what a holder's extend costs the server next to a pair, session and loopback
// included.
//
//	go test -run '^$' -bench 'Session(AcquireRelease|Extend)' -benchmem ./cluster/
func BenchmarkSessionExtend(b *testing.B) {
	ts := servertest.Start(b, cluster.DefaultConfig(), server.Config{})
	p := dialPair(b, ts.Addr, "bench/held", true)
	if err := p.c.Write(p.acq, wiretest.WriteTimeout); err != nil {
		b.Fatal(err)
	}
	g, err := p.c.TryNext(wiretest.ReadTimeout)
	if err != nil || g.Op != wire.OpGranted {
		b.Fatalf("acquire answered %+v (%v), want G", g, err)
	}
	ext := wire.AppendRequest(nil, &wire.Request{Op: wire.OpExtend, Owner: 3, Token: g.Token, Lease: 30, Key: []byte("bench/held")})
	b.ReportAllocs()
	for b.Loop() {
		if err := p.c.Write(ext, wiretest.WriteTimeout); err != nil {
			b.Fatal(err)
		}
		if r, err := p.c.TryNext(wiretest.ReadTimeout); err != nil || r.Op != wire.OpExtend {
			b.Fatalf("extend answered %+v (%v), want L", r, err)
		}
	}
}
