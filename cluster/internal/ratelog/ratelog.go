// Package ratelog keeps refusal and error logs to one line per source per interval, so that
// a peer or client retrying many times a second is logged once, not per attempt, while a
// flood of made-up sources cannot grow its memory. It never logs itself: callers ask Allow
// and write the line (with the count of lines held back) through their own go-hclog logger.
package ratelog

import (
	"sync"
	"time"
)

// Limiter lets one line per source through per interval. It remembers at most max sources;
// beyond that it lets one line per interval through for all the sources it cannot remember,
// and counts the rest. It is safe for concurrent use.
type Limiter struct {
	interval time.Duration
	max      int
	now      func() time.Time // time.Now; tests swap it for a fake clock

	mu         sync.Mutex
	last       map[string]time.Time
	overflow   time.Time // last line for a source not remembered
	suppressed map[string]uint64
	lost       uint64 // lines held back for sources not remembered
}

// New returns a Limiter that lets a line per source through every interval, for at most max
// sources at a time.
func New(interval time.Duration, max int) *Limiter {
	return &Limiter{interval: interval, max: max, now: time.Now, last: map[string]time.Time{}, suppressed: map[string]uint64{}}
}

// Allow reports whether to log a line for source now, and how many lines for it (or for
// sources not remembered) were held back since the last one let through.
func (l *Limiter) Allow(source string) (suppressed uint64, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, seen := l.last[source]; seen {
		if now.Sub(t) < l.interval {
			l.suppressed[source]++
			return 0, false
		}
		l.last[source] = now
		n := l.suppressed[source]
		delete(l.suppressed, source)
		return n, true
	}
	if len(l.last) >= l.max {
		for s, t := range l.last {
			if now.Sub(t) >= l.interval {
				delete(l.last, s)
				delete(l.suppressed, s)
			}
		}
	}
	if len(l.last) < l.max {
		l.last[source] = now
		return 0, true
	}
	if now.Sub(l.overflow) < l.interval {
		l.lost++
		return 0, false
	}
	l.overflow = now
	n := l.lost
	l.lost = 0
	return n, true
}
