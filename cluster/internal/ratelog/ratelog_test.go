package ratelog

import (
	"fmt"
	"testing"
	"time"
)

func TestOneLinePerSourcePerInterval(t *testing.T) {
	l := New(time.Hour, 8)
	l.now = newFakeClock().now
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

// fakeClock is a clock that moves only when the test says so.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func TestCountsWhatItHeldBack(t *testing.T) {
	clk := newFakeClock()
	l := New(time.Minute, 8)
	l.now = clk.now
	l.Allow("a")
	for range 3 {
		l.Allow("a")
	}
	clk.advance(time.Minute - time.Nanosecond)
	if _, ok := l.Allow("a"); ok {
		t.Fatal("a line let through a nanosecond before the interval ended")
	}
	clk.advance(time.Nanosecond)
	n, ok := l.Allow("a")
	if !ok || n != 4 {
		t.Fatalf("after the interval: ok %v, %d held back; want true, 4", ok, n)
	}
	if _, ok := l.Allow("a"); ok {
		t.Fatal("a second line within the new interval was let through")
	}
}

// Past max sources, one line per interval goes through for the ones not remembered, with the
// count held back; a remembered source whose interval ended makes room for a new one.
func TestOverflowInterval(t *testing.T) {
	clk := newFakeClock()
	l := New(time.Minute, 1)
	l.now = clk.now
	if _, ok := l.Allow("a"); !ok {
		t.Fatal("the first source was held back")
	}
	if _, ok := l.Allow("b"); !ok {
		t.Fatal("the first source over max was held back")
	}
	for range 2 {
		if _, ok := l.Allow("c"); ok {
			t.Fatal("a second line for sources not remembered within the interval was let through")
		}
	}
	clk.advance(time.Minute)
	if n, ok := l.Allow("d"); !ok || n != 0 || len(l.last) != 1 {
		t.Fatalf("after the interval a new source: ok %v, %d held back, %d remembered; want true, 0 (a is forgotten, d remembered), 1", ok, n, len(l.last))
	}
	if n, ok := l.Allow("e"); !ok || n != 2 {
		t.Fatalf("over max after the interval: ok %v, %d held back; want true, 2", ok, n)
	}
}

// A flood of made-up sources is remembered up to max; past it one line per interval goes
// through for all of them together.
func TestBoundedSources(t *testing.T) {
	l := New(time.Hour, 4)
	l.now = newFakeClock().now
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
	clk := newFakeClock()
	l := PerSecond{now: clk.now}
	if _, ok := l.Allow(); !ok {
		t.Fatal("the first line was held back")
	}
	for range 5 {
		if _, ok := l.Allow(); ok {
			t.Fatal("a second line within the second was let through")
		}
	}
	clk.advance(time.Second - time.Nanosecond)
	if _, ok := l.Allow(); ok {
		t.Fatal("a line let through a nanosecond before the second ended")
	}
	clk.advance(time.Nanosecond)
	if n, ok := l.Allow(); !ok || n != 6 {
		t.Fatalf("after a second: ok %v, %d held back; want true, 6", ok, n)
	}
	if _, ok := l.Allow(); ok {
		t.Fatal("a second line within the next second was let through")
	}
}
