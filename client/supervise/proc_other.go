//go:build !linux

package supervise

import "golang.org/x/sys/unix"

// bootNanos is CLOCK_MONOTONIC in nanoseconds, the clock latch and its guard share here
// (Linux uses CLOCK_BOOTTIME, which also counts suspended time).
func bootNanos() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("supervise: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}

// stopWatch cannot see stops here without reaping: the command counts as never stopped, and
// is extended while stopped (on Linux it is not).
type stopWatch struct{ pid int }

func (w *stopWatch) Stopped() bool { return false }
