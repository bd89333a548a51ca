package fsm

import (
	"runtime"
	"testing"
	"unsafe"
)

// appendKey appends "lock/%07d" (i < 10,000,000) without allocating.
func appendKey(b []byte, i int) []byte {
	b = append(b, "lock/0000000"...)
	for j := len(b) - 1; i > 0 && j >= len(b)-7; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return b
}

// tableHeapPerKey fills a fresh table with n keys like "lock/0000123" and
// returns the live heap it costs per key, measured after a full GC on each
// side. It includes the map and the key strings, which the expiry heap
// shares.
func tableHeapPerKey(tb testing.TB, n int) float64 {
	tb.Helper()
	var before, after runtime.MemStats
	buf := make([]byte, 0, 16)
	runtime.GC()
	runtime.ReadMemStats(&before)
	t, err := NewTable(0)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		buf = appendKey(buf[:0], i)
		if _, _, err := t.Acquire(buf, 30); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if t.Len() != n {
		tb.Fatalf("Len = %d, want %d", t.Len(), n)
	}
	runtime.KeepAlive(t)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestValueSizes: the extension count fits in padding that was already
// there, so a held key, a decoded command and a result cost what they did.
func TestValueSizes(t *testing.T) {
	for name, got := range map[string]uintptr{
		"Holder":  unsafe.Sizeof(Holder{}),
		"Command": unsafe.Sizeof(Command{}),
		"Result":  unsafe.Sizeof(Result{}),
	} {
		want := map[string]uintptr{"Holder": 16, "Command": 48, "Result": 48}[name]
		if got != want {
			t.Errorf("%s is %d bytes, want %d", name, got, want)
		}
	}
}

// BenchmarkTableMemory reports the heap per key of a table holding 1,000,000
// keys. The whole service has 250 B/key for table, expiry heap and the rest.
func BenchmarkTableMemory(b *testing.B) {
	var perKey float64
	for b.Loop() {
		perKey = tableHeapPerKey(b, 1_000_000)
	}
	b.ReportMetric(perKey, "B/key")
}

// TestTableMemoryBudget keeps the table's share of the 250 B/key budget from
// creeping up unnoticed.
func TestTableMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 1,000,000-key memory measurement")
	}
	const budget = 120 // bytes per key for the table, key strings included
	if got := tableHeapPerKey(t, 1_000_000); got > budget {
		t.Fatalf("table uses %.1f B/key, budget %d", got, budget)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	t, _ := NewTable(0)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = appendKey(nil, i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i%len(keys)]
		tok, _, err := t.Acquire(k, 30)
		if err != nil || !t.Release(k, tok) {
			b.Fatal("acquire/release failed", err)
		}
		i++
	}
}

func BenchmarkHolderLookup(b *testing.B) {
	t, _ := NewTable(0)
	buf := make([]byte, 0, 16)
	for i := range 100_000 {
		buf = appendKey(buf[:0], i)
		t.Acquire(buf, 30)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = appendKey(buf[:0], i%100_000)
		if _, ok := t.Holder(buf); !ok {
			b.Fatal("missing key")
		}
		i++
	}
}

func TestAppendKey(t *testing.T) {
	for i, want := range map[int]string{0: "lock/0000000", 7: "lock/0000007", 123: "lock/0000123", 9999999: "lock/9999999"} {
		if got := string(appendKey([]byte("x"), i)); got != "x"+want {
			t.Errorf("appendKey(%d) = %q, want %q", i, got, "x"+want)
		}
	}
}
