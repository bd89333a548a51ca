package client

import (
	"math"
	"math/bits"
	"time"
)

// Deadline arithmetic of protocol revision 2 (docs/protocol.md sections 10
// and 13). Every function here is pure and allocation-free: the acquire
// path calls grantEnd once per grant.
//
// A span of server time d is at least d x (1 - rho) on the client's clock, so the client
// counts shrink(d) = d - ceil(d x rho), in whole nanoseconds: d x (1 - rho) rounded down.

// rhoPPB is rho in parts per billion, the precision at which the client applies it.
func rhoPPB(rho float64) uint64 { return uint64(math.Round(rho * 1e9)) }

// shrink is d x (1 - ppb/1e9) rounded down to the nanosecond, exactly: d minus the margin
// d x ppb / 1e9 rounded up. 0 for d <= 0. ppb is at most 1e9 (rho 1).
func shrink(d time.Duration, ppb uint64) time.Duration {
	if d <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(d), ppb) // < 2^63 x 2^30: hi < 2^29 < 1e9, so Div64 cannot overflow
	margin, rem := bits.Div64(hi, lo, 1e9)
	if rem != 0 {
		margin++
	}
	return d - time.Duration(margin)
}

// grantEnd is the deadline of a grant G on a revised connection: the request was written at
// writtenAt, its G read at readAt, and the server says the lease started age milliseconds
// after it read the request. The client counts
//
//	writtenAt + (min(age, readAt - writtenAt) + lease) x (1 - rho), rounded down.
//
// The lease started after the server read the frame, which is after writtenAt, and age later
// on the server's clock; the lease then runs lease on that clock. The age is capped at what
// the client saw pass between its write and its read, so a wrong age (a bug, a clock far
// off) can never move the deadline later than a lease started at readAt. This is the rule of
// docs/protocol.md section 10. Before rounding, the other form written_at + min(age x (1 - rho), elapsed) + lease x
// (1 - rho) is never earlier, and the same whenever the age is at most what the client saw.
func grantEnd(writtenAt, readAt time.Time, ageMillis uint32, lease uint16, ppb uint64) time.Time {
	age := time.Duration(ageMillis) * time.Millisecond
	age = min(age, max(0, readAt.Sub(writtenAt)))
	return writtenAt.Add(shrink(age+time.Duration(lease)*time.Second, ppb))
}

// leaseSpan is how long an extension of lease seconds holds at least, on the client's clock,
// from the moment the extend was written: lease x (1 - rho), rounded down.
func leaseSpan(lease uint16, ppb uint64) time.Duration {
	return shrink(time.Duration(lease)*time.Second, ppb)
}
