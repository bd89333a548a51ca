package expiry

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

const benchItems = 1_000_000

// filledHeap returns a heap of n items with random deadlines in [0, span).
func filledHeap(n int, span int64, rng *rand.Rand) *Heap {
	h := &Heap{}
	for i := range n {
		h.Push(&Item{Deadline: rng.Int64N(span), Token: uint64(i + 1)})
	}
	return h
}

// BenchmarkPushPop1M pops the earliest item of a 1,000,000-item heap and
// pushes it back with a later random deadline: one Push and one Pop per op.
func BenchmarkPushPop1M(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	h := filledHeap(benchItems, 1<<40, rng)
	b.ReportAllocs()
	for b.Loop() {
		it := h.Pop()
		it.Deadline += rng.Int64N(1 << 40)
		h.Push(it)
	}
}

// BenchmarkPopDueChunk measures one sweep chunk: PopDue of SweepChunk (1024)
// due items from a 1,000,000-item heap whose items are all due, which is
// what bounds how long a sweep holds the node's lock at a time. The popped
// items are pushed back, untimed, with new due deadlines, so the heap stays
// at 1,000,000.
func BenchmarkPopDueChunk(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	const span = 1 << 40
	h := filledHeap(benchItems, span, rng)
	popped := make([]*Item, 0, SweepChunk)
	collect := func(it *Item) { popped = append(popped, it) }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, more := PopDue(h, span, SweepChunk, collect)
		if n != SweepChunk || !more {
			b.Fatalf("PopDue = %d, %v", n, more)
		}
		b.StopTimer()
		for _, it := range popped {
			it.Deadline = rng.Int64N(span)
			h.Push(it)
		}
		popped = popped[:0]
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/chunk")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/SweepChunk, "ns/pop")
}

// heapPerItem returns the live heap cost per queued item of a heap holding n
// items, measured after a full GC on each side. Keys are made before the
// first measurement because the heap shares them with the lock table.
func heapPerItem(tb testing.TB, n int) float64 {
	tb.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "lock/" + string(rune('a'+i%26))
	}
	rng := rand.New(rand.NewPCG(3, 3))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := &Heap{}
	for i := range n {
		h.Push(&Item{Deadline: rng.Int64N(1 << 40), Token: uint64(i + 1), Key: keys[i]})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if h.Len() != n {
		tb.Fatalf("Len = %d", h.Len())
	}
	runtime.KeepAlive(h)
	runtime.KeepAlive(keys)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkHeapMemory reports the heap per item of a 1,000,000-item heap
// (items and slice; key strings excluded, they belong to the table).
func BenchmarkHeapMemory(b *testing.B) {
	var perItem float64
	for b.Loop() {
		perItem = heapPerItem(b, benchItems)
	}
	b.ReportMetric(perItem, "B/item")
}

// TestHeapMemoryBudget keeps the heap's share of the service's 250 B/key
// budget from creeping up unnoticed.
func TestHeapMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 1,000,000-item memory measurement")
	}
	const budget = 72 // 48 B item + 8 B slot, with room for append's spare capacity
	if got := heapPerItem(t, benchItems); got > budget {
		t.Fatalf("heap uses %.1f B/item, budget %d", got, budget)
	}
}
