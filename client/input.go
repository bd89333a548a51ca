package client

import (
	"fmt"
	"time"

	"github.com/latchd/latch/wire"
)

// Limits of the official client (docs/protocol.md section 10), in one place.
const (
	// DefaultLease is the lease asked for when AcquireOptions.Lease is 0.
	DefaultLease = 30 * time.Second
	// MaxWorkBudget is the largest min work budget Acquire accepts.
	MaxWorkBudget = 250 * time.Second
	// IOTimeout bounds an acquire with wait 0 from the call to its answer (queue,
	// reconnects, unsent failovers and the write included), and every release from its
	// call (or, for a compensating release, from its enqueueing) to its answer.
	IOTimeout = 5 * time.Second
	// ReplyGrace is how long after the end of the wait it stamped an acquire with wait > 0
	// still listens for the answer; see "One deadline" in the package documentation.
	ReplyGrace = time.Second
)

// ioTimeout is IOTimeout; tests may shorten it.
var ioTimeout = IOTimeout

// request is an acquire after its inputs were checked and normalized.
type request struct {
	key    string
	wait   uint8         // whole seconds as asked (0 = one immediate attempt)
	lease  uint16        // whole seconds, wire.MinLease..wire.MaxLease
	budget time.Duration // whole seconds, 0..MaxWorkBudget and at most the lease
}

// ceilSeconds rounds d up to whole seconds. Negative durations are never in range.
func ceilSeconds(d time.Duration) (int64, bool) {
	if d < 0 {
		return 0, false
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s, true
}

// Durations are an acquire's wait, lease and min work budget as the client sends them:
// whole seconds, the lease 0 made DefaultLease.
type Durations struct {
	Wait, Lease, Budget time.Duration
}

// CheckAcquire checks an acquire's durations as Acquire does, before anything is sent: each
// rounded up to whole seconds and then range-checked (wait 0..wire.MaxWait s, lease
// wire.MinLease..wire.MaxLease s, budget 0..MaxWorkBudget), and the budget at most the lease.
// Nothing is clamped. Its errors wrap ErrUnsupportedDuration or ErrInsufficientLease.
func CheckAcquire(budget time.Duration, o AcquireOptions) (Durations, error) {
	w, ok := ceilSeconds(o.Wait)
	if !ok || w > wire.MaxWait {
		return Durations{}, fmt.Errorf("%w: wait %v (%d s after rounding up) is outside 0..%d s", ErrUnsupportedDuration, o.Wait, w, wire.MaxWait)
	}
	lease, err := leaseSeconds(o.Lease)
	if err != nil {
		return Durations{}, err
	}
	l := int64(lease)
	b, ok := ceilSeconds(budget)
	maxB := int64(MaxWorkBudget / time.Second)
	if !ok || b > maxB {
		return Durations{}, fmt.Errorf("%w: min work budget %v (%d s after rounding up) is outside 0..%d s", ErrUnsupportedDuration, budget, b, maxB)
	}
	if b > l {
		return Durations{}, fmt.Errorf("%w: min work budget %d s > lease %d s", ErrInsufficientLease, b, l)
	}
	return Durations{Wait: time.Duration(w) * time.Second, Lease: time.Duration(l) * time.Second, Budget: time.Duration(b) * time.Second}, nil
}

// CheckKey checks a key with the official client's rules (wire.CheckClientKey: section 4
// plus no CR), as Acquire, Release and Extend do before anything is sent. Its error wraps
// ErrBadKey and the wire's key error.
func CheckKey(key string) error {
	if err := wire.CheckClientKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return nil
}

// CheckToken checks a token as Release and Extend do before anything is sent: no grant
// carries 0 or a token above wire.MaxToken, so those are ErrNotHeld at once.
func CheckToken(token uint64) error {
	if token == 0 || token > wire.MaxToken {
		return fmt.Errorf("%w: token %d is never granted (nothing sent)", ErrNotHeld, token)
	}
	return nil
}

// normalize checks an acquire before anything is sent: the key by CheckKey, and the
// durations by CheckAcquire.
func normalize(key string, budget time.Duration, o AcquireOptions) (request, error) {
	if err := CheckKey(key); err != nil {
		return request{}, err
	}
	d, err := CheckAcquire(budget, o)
	if err != nil {
		return request{}, err
	}
	return request{key: key, wait: uint8(d.Wait / time.Second), lease: uint16(d.Lease / time.Second), budget: d.Budget}, nil
}

// leaseSeconds checks a lease as an acquire's or an extend's: 0 means DefaultLease, and the
// rest is rounded up to whole seconds and must then be wire.MinLease..wire.MaxLease.
func leaseSeconds(lease time.Duration) (uint16, error) {
	if lease == 0 {
		lease = DefaultLease
	}
	l, ok := ceilSeconds(lease)
	if !ok || l < wire.MinLease || l > wire.MaxLease {
		return 0, fmt.Errorf("%w: lease %v (%d s after rounding up) is outside %d..%d s", ErrUnsupportedDuration, lease, l, wire.MinLease, wire.MaxLease)
	}
	return uint16(l), nil
}
