package member

import (
	"flag"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/wire"
)

var (
	massKeys  = flag.Int("mass-keys", 1_000_000, "BenchmarkMassExpiry: leases that end together")
	massLease = flag.Int("mass-lease", 60, "BenchmarkMassExpiry: their lease in seconds (longer than the fill takes)")
)

// BenchmarkMassExpiry ends -mass-keys leases at the same moment on a 3-node in-process
// cluster (benchCluster, as BenchmarkClusterMemory) while
// a probe acquires and releases its own key every 5 ms through the leader (from 1 s before the
// leases end until 1 s after the last is freed), and reports how
// long the cluster took from the lease end until the leader's table held none of them, the
// probe's latencies and refusals, and the heap during it.
//
// The leases are made to end together the way a failover does it: once the fill is applied
// everywhere, the leader's node drops its view and rebuilds it (Follow, Lead), which restarts
// every lease in full from that moment.
//
// Heap: base is the live heap (after GC) of the whole process, three nodes, before the leases
// end; peak-live the largest live heap the runtime's GCs marked while they were being freed
// (sampled every 50 ms, no GC forced); peak-alloc the largest heap of objects seen, garbage
// included.
//
//	go test -run '^$' -bench MassExpiry -benchtime 1x -timeout 30m ./cluster/member/
//	go test -run '^$' -bench MassExpiry -benchtime 1x ./cluster/member/ -mass-keys 100000
func BenchmarkMassExpiry(b *testing.B) {
	for range b.N {
		massExpiry(b, *massKeys, uint16(*massLease))
	}
}

func massExpiry(b *testing.B, keys int, lease uint16) {
	ms, leader := benchCluster(b, keys)
	lead := leader.m.Node()
	t0 := time.Now()
	fillLeases(b, lead, keys, lease)
	appliedEverywhere(b, ms, keys, 2*time.Minute)
	if fill := time.Since(t0); fill > time.Duration(lease)*time.Second-5*time.Second {
		b.Fatalf("the fill took %v, too close to the %d s lease: raise -mass-lease", fill, lease)
	}
	base := liveHeap()
	// Every deadline Lead sets is at or after end: the time measured from end to the last
	// expiry may be a little longer than it took, never shorter.
	end := time.Now().Add(time.Duration(lease) * time.Second)
	lead.Follow()
	lead.Lead()

	var stop atomic.Bool
	var wg sync.WaitGroup
	var pr probeResult
	var peakLive, peakAlloc atomic.Uint64
	wg.Add(2)
	go func() {
		defer wg.Done()
		time.Sleep(time.Until(end.Add(-time.Second))) // measure the expiry, not the quiet wait
		pr = probeKey(lead, &stop)
	}()
	go func() { defer wg.Done(); sampleHeap(&stop, end, &peakLive, &peakAlloc) }()

	time.Sleep(time.Until(end))
	left := func() int { return leader.m.Raft().FSM().Len() }
	if testing.Verbose() {
		go func() {
			for !stop.Load() {
				b.Logf("%v left %d", time.Since(end).Round(time.Millisecond), left())
				time.Sleep(250 * time.Millisecond)
			}
		}()
	}
	clustertest.Eventually(b, 5*time.Minute, "every lease freed", func() bool {
		return left() <= 1 // the probe's own key may be held
	})
	freed := time.Since(end)
	time.Sleep(time.Second) // the probe goes on a little after the last expiry
	stop.Store(true)
	wg.Wait()

	slices.Sort(pr.lat)
	p := func(q float64) float64 {
		if len(pr.lat) == 0 {
			return 0
		}
		return float64(pr.lat[int(q*float64(len(pr.lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(freed.Seconds(), "free-s")
	b.ReportMetric(float64(keys)/freed.Seconds(), "expiries/s")
	b.ReportMetric(float64(len(pr.lat)), "probe-ops")
	b.ReportMetric(float64(pr.refused), "probe-refused")
	b.ReportMetric(p(0.99), "probe-p99-ms")
	b.ReportMetric(p(1), "probe-max-ms")
	b.ReportMetric(base/1e6, "heap-base-MB")
	b.ReportMetric(float64(peakLive.Load())/1e6, "heap-peak-live-MB")
	b.ReportMetric(float64(peakAlloc.Load())/1e6, "heap-peak-alloc-MB")
	b.ReportMetric(float64(peakLive.Load())/base, "peak-live/base")
	if pr.refused > 0 {
		b.Errorf("the probe was refused %d times, first: %+v", pr.refused, pr.first)
	}
}

// fillLeases acquires keys keys with lease, at most window at a time, all granted.
func fillLeases(b *testing.B, n *cluster.Node, keys int, lease uint16) {
	s := &slots{free: make(chan struct{}, window)}
	c := n.Attach(s, "")
	key := make([]byte, 0, 32)
	deadline := time.Now().Add(10 * time.Minute)
	for i := range keys {
		select {
		case s.free <- struct{}{}:
		case <-time.After(time.Until(deadline)):
			b.Fatalf("fill: %d of %d acquires made in 10 minutes", i, keys)
		}
		key = append(key[:0], "lock/"...)
		key = strconv.AppendInt(key, int64(10_000_000+i), 10)
		n.Acquire(c, uint64(i+1), key, 0, lease, n.Now())
	}
	clustertest.Eventually(b, time.Minute, "every acquire answered", func() bool {
		return s.grants.Load()+s.failed.Load() == int64(keys)
	})
	if f := s.failed.Load(); f != 0 {
		b.Fatalf("%d acquires not granted, first: %+v", f, s.first.Load())
	}
}

type probeResult struct {
	lat     []time.Duration
	refused int
	first   wire.Response
}

// chanReplier hands each response to the probe.
type chanReplier chan wire.Response

func (c chanReplier) Reply(r wire.Response) {
	select {
	case c <- r:
	default:
	}
}

// probeKey acquires (wait 0) and releases its own key every 5 ms until stop, timing each request
// from the call to its answer. Anything but A then R is a refusal. Bounded: a request
// unanswered for 10 s ends it.
func probeKey(n *cluster.Node, stop *atomic.Bool) (pr probeResult) {
	ch := make(chanReplier, 4)
	c := n.Attach(ch, "")
	key := []byte("probe")
	ask := func(do func(), want wire.Op) (wire.Response, bool) {
		t0 := time.Now()
		do()
		select {
		case r := <-ch:
			pr.lat = append(pr.lat, time.Since(t0))
			if r.Op != want {
				if pr.refused++; pr.refused == 1 {
					pr.first = r
				}
				return r, false
			}
			return r, true
		case <-time.After(10 * time.Second):
			pr.lat = append(pr.lat, time.Since(t0))
			pr.refused++
			stop.Store(true)
			return wire.Response{}, false
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for owner := uint64(1); !stop.Load() && owner < 1e7; owner += 2 {
		<-tick.C
		r, ok := ask(func() { n.Acquire(c, owner, key, 0, 30, n.Now()) }, wire.OpAcquire)
		if ok {
			ask(func() { n.Release(c, owner+1, key, r.Token) }, wire.OpRelease)
		}
	}
	return pr
}

// sampleHeap records, every 50 ms from end until stop, the largest live heap (as the last GC
// marked it: runtime/metrics /gc/heap/live:bytes) and the largest heap of objects, garbage
// included (/memory/classes/heap/objects:bytes). It forces no GC.
func sampleHeap(stop *atomic.Bool, end time.Time, peakLive, peakAlloc *atomic.Uint64) {
	time.Sleep(time.Until(end))
	ss := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	for !stop.Load() {
		metrics.Read(ss)
		peakLive.Store(max(peakLive.Load(), ss[0].Value.Uint64()))
		peakAlloc.Store(max(peakAlloc.Load(), ss[1].Value.Uint64()))
		time.Sleep(50 * time.Millisecond)
	}
}

// On three Members in one process, the waiter behind a 2 s lease is granted by the leader's
// expiry timer: never before the lease ends, and under 3.5 s after the first grant, below the
// 5 s backstop sweep (which also runs: a broken timer would leave the grant to it, at 2-7 s,
// failing this most of the time; cmd/latch's TestClusterWaiterGrantedAtLeaseEnd chains two
// handovers over TCP so that it fails every time). The handover time is logged.
func TestClusterHandoverAtLeaseEnd(t *testing.T) {
	_, leader := benchCluster(t, 16)
	n := leader.m.Node()
	ha, hb := make(chanReplier, 1), make(chanReplier, 1)
	a, b := n.Attach(ha, ""), n.Attach(hb, "")
	asked := time.Now() // the lease starts when the grant is applied: after this
	n.Acquire(a, 1, []byte("k"), 0, 2, n.Now())
	var granted time.Time
	select {
	case r := <-ha:
		if r.Op != wire.OpAcquire {
			t.Fatalf("first acquire: %+v", r)
		}
		granted = time.Now()
	case <-time.After(30 * time.Second):
		t.Fatal("first acquire unanswered for 30 s")
	}
	n.Acquire(b, 2, []byte("k"), 10, 30, n.Now())
	select {
	case r := <-hb:
		took := time.Since(granted)
		if r.Op != wire.OpAcquire {
			t.Fatalf("waiter answered %+v after %v, want A", r, took)
		}
		if since := time.Since(asked); since < 2*time.Second {
			t.Fatalf("waiter granted %v after the first acquire was made: before its 2 s lease ended", since)
		}
		if took >= 3500*time.Millisecond || 3500*time.Millisecond >= expiry.SweepInterval {
			t.Fatalf("waiter granted %v after the first holder's A, want under 3.5 s (below the %v sweep): the expiry timer did not hand over", took, expiry.SweepInterval)
		}
		t.Logf("waiter granted %v after the first holder's A", took)
	case <-time.After(20 * time.Second):
		t.Fatal("waiter unanswered for 20 s")
	}
}
