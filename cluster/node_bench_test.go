package cluster

import (
	"testing"

	"github.com/latchd/latch/wire"
)

// What the node itself spends on a pair and on an extend in single mode (no network, no
// session): the ratio says what share of a node's pair throughput holders that extend take.
// 10,000 holders extending every 10 s are 1,000 extends/s; at P pairs/s they cost about
// 1,000 x (ns per extend) / (P x ns per pair) of the node's time.
//
//	go test -run '^$' -bench 'Node(AcquireRelease|Extend)$' -benchmem ./cluster/

func BenchmarkNodeAcquireRelease(b *testing.B) {
	n, err := NewNode(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	out := &lastReply{}
	c := n.Attach(out, "")
	key := []byte("bench/pair")
	b.ReportAllocs()
	for b.Loop() {
		n.Acquire(c, 1, key, 0, 30, n.Now())
		if out.r.Op != wire.OpAcquire {
			b.Fatalf("acquire answered %+v", out.r)
		}
		n.Release(c, 2, key, out.r.Token)
	}
}

// BenchmarkNodeExtend extends one held key again and again, as a holder does every period.
func BenchmarkNodeExtend(b *testing.B) {
	n, err := NewNode(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	out := &lastReply{}
	c := n.Attach(out, "")
	key := []byte("bench/held")
	n.Acquire(c, 1, key, 0, 30, n.Now())
	if out.r.Op != wire.OpAcquire {
		b.Fatalf("acquire answered %+v", out.r)
	}
	tok := out.r.Token
	b.ReportAllocs()
	for b.Loop() {
		n.Extend(c, 2, key, tok, 30)
		if out.r.Op != wire.OpExtend {
			b.Fatalf("extend answered %+v", out.r)
		}
	}
}
