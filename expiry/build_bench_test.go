package expiry

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// BenchmarkHeapBuild1M is what a new leader does to rebuild its view: 1,000,000 holders in
// an order unrelated to their tokens, all with the same lease from one moment.
func BenchmarkHeapBuild1M(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	toks := rand.New(rand.NewPCG(1, 2)).Perm(n)
	for i := range keys {
		keys[i] = "lock/" + strconv.Itoa(10_000_000+i)
	}
	b.ResetTimer()
	for range b.N {
		h := NewHeap()
		h.Grow(n)
		for i, k := range keys {
			h.Set(k, uint64(toks[i]+1), 30e9)
		}
		if h.Len() != n {
			b.Fatal(h.Len())
		}
	}
}
