package cluster

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// discard is a Replier that drops every response (counting grants).
type discard struct{ grants atomic.Int64 }

func (d *discard) Reply(r wire.Response) {
	if r.Op == wire.OpAcquire {
		d.grants.Add(1)
	}
}

const scaleKeys = 1_000_000

// fill acquires scaleKeys distinct keys like "lock/0000123" with the given lease.
func fill(b *testing.B, n *Node, c *Session, lease uint16, at time.Time) {
	key := make([]byte, 0, 32)
	for i := range scaleKeys {
		key = append(key[:0], "lock/"...)
		key = strconv.AppendInt(key, int64(10_000_000+i), 10)
		n.Acquire(c, uint64(i+1), key, 0, lease, at)
	}
	if got := n.Stats().Keys; got != scaleKeys {
		b.Fatalf("%d keys held, want %d", got, scaleKeys)
	}
}

// scaleNode is a single-mode node on a fake clock with room for twice scaleKeys, and a
// Replier for its sessions.
func scaleNode(b *testing.B) (*Node, *clustertest.FakeClock, *discard) {
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Clock, cfg.MaxKeys = clk, 2*scaleKeys
	n, err := NewNode(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return n, clk, &discard{}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkNodeMemory reports the heap bytes per held key of a node holding 1,000,000 keys:
// lock table, expiry heap and the node's per-key state together (target: at most 250).
func BenchmarkNodeMemory(b *testing.B) {
	for range b.N {
		before := heapInUse()
		n, clk, d := scaleNode(b)
		fill(b, n, n.Attach(d, ""), 30, clk.Now())
		after := heapInUse()
		b.ReportMetric(float64(after-before)/scaleKeys, "B/key")
		runtime.KeepAlive(n)
	}
}

// BenchmarkSweepStall expires 1,000,000 leases in one sweep while another goroutine keeps
// acquiring and releasing a probe key, and reports the longest the probe waited for one
// request (target: at most 50 ms) and how long the whole sweep took.
func BenchmarkSweepStall(b *testing.B) {
	for range b.N {
		b.StopTimer()
		n, clk, d := scaleNode(b)
		c := n.Attach(d, "")
		fill(b, n, c, 1, clk.Now())
		clk.Advance(2 * time.Second)
		b.StartTimer()

		done := make(chan int)
		start := time.Now()
		go func() { done <- n.Sweep() }()
		var worst time.Duration
		var probes int
		probe := []byte("probe")
		for swept := false; !swept; {
			select {
			case freed := <-done:
				if freed != scaleKeys {
					b.Fatalf("sweep freed %d, want %d", freed, scaleKeys)
				}
				swept = true
			default:
				t0 := time.Now()
				n.Acquire(c, 1, probe, 0, 30, t0)
				n.Release(c, 2, probe, uint64(n.Stats().LastToken))
				worst = max(worst, time.Since(t0))
				probes++
			}
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "sweep-ms")
		b.ReportMetric(float64(worst.Microseconds())/1000, "max-stall-ms")
		b.ReportMetric(float64(probes), "probes")
	}
}
