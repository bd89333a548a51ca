package peer

import (
	"sync"
	"time"
)

// sourceLog lets one line per source through per interval, so that a peer retrying a refused
// connection many times a second is logged once, not per attempt. It remembers at most max
// sources; beyond that (a flood of made-up sources) it lets one line per interval through
// for all the sources it cannot remember, and counts the rest.
type sourceLog struct {
	interval time.Duration
	max      int

	mu         sync.Mutex
	last       map[string]time.Time
	overflow   time.Time // last line for a source not remembered
	suppressed map[string]uint64
	lost       uint64 // lines held back for sources not remembered
}

func newSourceLog(interval time.Duration, max int) *sourceLog {
	return &sourceLog{interval: interval, max: max, last: map[string]time.Time{}, suppressed: map[string]uint64{}}
}

// allow reports whether to log a line for source now, and how many lines for it (or for
// sources not remembered) were held back since the last one let through.
func (l *sourceLog) allow(source string) (suppressed uint64, ok bool) {
	now := time.Now()
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
