package ratelog

import (
	"sync/atomic"
	"time"
)

// PerSecond lets one line through per second, whatever its source, and counts the ones it
// holds back, so that a flood of refused connections cannot flood the log. Its zero value is
// ready; it is safe for concurrent use and takes no lock.
type PerSecond struct {
	next       atomic.Int64 // unix nanoseconds before which lines are held back
	suppressed atomic.Uint64
	now        func() time.Time // nil: time.Now; tests set a fake clock before the first Allow
}

// Allow reports whether to log now, and how many lines were held back since the last one let
// through.
func (l *PerSecond) Allow() (suppressed uint64, ok bool) {
	clock := time.Now
	if l.now != nil {
		clock = l.now
	}
	now := clock().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(time.Second)) {
		l.suppressed.Add(1)
		return 0, false
	}
	return l.suppressed.Swap(0), true
}
