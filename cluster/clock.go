package cluster

import "time"

// Clock is the node's time source. Deadlines inside the node are nanoseconds since the
// clock's epoch (monotonic), so a wall-clock step never ends a lease early.
type Clock interface {
	// Now returns the current time (with its monotonic reading).
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed. The returned stop function
	// reports whether it stopped the call before it ran.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// RealClock is the process clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (RealClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
