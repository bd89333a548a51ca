package clustertest

import (
	"sort"
	"sync"
	"time"
)

// FakeClock is a clock (cluster.Clock, client.Clock) that moves only when a test advances
// it. Advance runs every timer that came due, earliest first, outside the clock's lock:
// synchronously, inside Advance (NewFakeClock), or each in a new goroutine, as time.AfterFunc
// does (NewAsyncFakeClock), for code whose timers take a lock the caller of Advance holds.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	async  bool
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
	fired   bool
}

// NewFakeClock returns a clock at start whose timers run inside Advance.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// NewAsyncFakeClock returns a clock at start whose timers run in their own goroutines, and
// run at once when set for a duration of zero or less.
func NewAsyncFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start, async: true} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f once the clock has been advanced by d. The stop function reports whether
// it stopped the call before it ran.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.async && d <= 0 {
		go f()
		return func() bool { return false }
	}
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.fired || t.stopped {
			return false
		}
		t.stopped = true
		return true
	}
}

// Advance moves the clock by d and runs every timer that came due, earliest first.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.fired = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		if c.async {
			go t.f()
		} else {
			t.f()
		}
	}
}

// HasTimerAt reports whether a timer that has neither run nor been stopped is due at at.
func (c *FakeClock) HasTimerAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if !t.stopped && t.at.Equal(at) {
			return true
		}
	}
	return false
}
