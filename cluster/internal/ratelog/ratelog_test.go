package ratelog

import (
	"fmt"
	"testing"
	"time"
)

func TestOneLinePerSourcePerInterval(t *testing.T) {
	l := New(time.Hour, 8)
	if _, ok := l.Allow("a"); !ok {
		t.Fatal("the first line of a source was held back")
	}
	for range 5 {
		if _, ok := l.Allow("a"); ok {
			t.Fatal("a second line within the interval was let through")
		}
	}
	if _, ok := l.Allow("b"); !ok {
		t.Fatal("another source's first line was held back")
	}
}

func TestCountsWhatItHeldBack(t *testing.T) {
	l := New(50*time.Millisecond, 8)
	l.Allow("a")
	for range 3 {
		l.Allow("a")
	}
	time.Sleep(60 * time.Millisecond)
	n, ok := l.Allow("a")
	if !ok || n != 3 {
		t.Fatalf("after the interval: ok %v, %d held back; want true, 3", ok, n)
	}
}

// A flood of made-up sources is remembered up to max; past it one line per interval goes
// through for all of them together.
func TestBoundedSources(t *testing.T) {
	l := New(time.Hour, 4)
	let := 0
	for i := range 1000 {
		if _, ok := l.Allow(fmt.Sprint("src", i)); ok {
			let++
		}
	}
	if let != 5 || len(l.last) != 4 {
		t.Fatalf("%d lines let through, %d sources remembered; want 5 (4 remembered + 1 overflow) and 4", let, len(l.last))
	}
}

func TestPerSecond(t *testing.T) {
	var l PerSecond
	if _, ok := l.Allow(); !ok {
		t.Fatal("the first line was held back")
	}
	for range 5 {
		if _, ok := l.Allow(); ok {
			t.Fatal("a second line within the second was let through")
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if n, ok := l.Allow(); !ok || n != 5 {
		t.Fatalf("after a second: ok %v, %d held back; want true, 5", ok, n)
	}
}
