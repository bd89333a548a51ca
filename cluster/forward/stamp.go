package forward

import (
	"time"

	"github.com/latchd/latch/wire"
)

// stamp returns the wait to write for an acquire that asked for wait seconds and whose frame
// the follower read at readAt, when it is written at now: the time left until readAt+wait,
// rounded up to whole seconds. The leader counts that wait from its own read, which comes
// after now, so the wait the client gets is never shorter than it asked, and at most one
// second (the rounding) plus the link's transit longer. A wait of 0 stays 0 (the immediate
// attempt has no deadline to run out). ok is false when nothing is left: the acquire must not
// be sent.
func stamp(wait uint8, readAt, now time.Time) (stamped uint8, ok bool) {
	if wait == 0 {
		return 0, true
	}
	// Never more than asked, even when now is before readAt (a clock that went back).
	return wire.StampWait(readAt.Add(time.Duration(wait)*time.Second).Sub(now), wait)
}

// unsentDeadline is when an unsent request stops being worth sending: the end of an
// acquire's wait, or unsent after readAt for the immediate attempts (wait 0, release).
func unsentDeadline(wait uint8, readAt time.Time, unsent time.Duration) time.Time {
	if wait > 0 {
		return readAt.Add(time.Duration(wait) * time.Second)
	}
	return readAt.Add(unsent)
}
