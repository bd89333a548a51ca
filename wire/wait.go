package wire

import "time"

// StampWait is the wait to write into an acquire that has left until its deadline: left
// rounded up to whole seconds, at most most (wire.MaxWait for a new acquire; the wait the
// client asked for, when a node forwards one). The server counts the wait from its own read
// of the frame, which comes after the stamp, so the wait a client gets is never shorter than
// the time it has left, and at most the rounding (under a second) plus transit longer. ok
// is false when nothing is left: the acquire must not be sent. A wait of 0 (the immediate
// attempt) is not stamped: callers keep it 0.
func StampWait(left time.Duration, most uint8) (wait uint8, ok bool) {
	if left <= 0 {
		return 0, false
	}
	secs := (left + time.Second - 1) / time.Second
	if secs > time.Duration(most) {
		return most, true
	}
	return uint8(secs), true
}
