package cluster

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// Config configures a Node.
type Config struct {
	// MaxPending is the hard limit of acquires received and not yet answered, waiters
	// included. The pending gate closes at 90% of it and opens below 75%.
	MaxPending int
	// MaxKeys is the hard limit of keys in the lock table. While its gate is closed,
	// acquires of keys not in the table are answered B.
	MaxKeys int
	// MaxWaiters is the hard limit of queued waiters over all keys. While its gate is closed,
	// acquires that would have to wait are answered B.
	MaxWaiters int
	// TokenFloor makes the first token TokenFloor+1 (0..2^63-1).
	TokenFloor uint64
	// Logger receives one structured line per event. Nil means no logging.
	Logger hclog.Logger
	// Audit, if set, receives the audit trail: one INFO line per grant, release, expiry and
	// forced release (audit.go). Nil means off.
	Audit hclog.Logger
	// Metrics receives counters and gauges. Nil means a private, unexported set.
	Metrics *Metrics
	// Clock is the node's time source. Nil means the real monotonic clock.
	Clock Clock
	// Replicated, when set, makes a cluster-mode node: commands go through the replicated
	// log and TokenFloor is the proposer's business (it is proposed at bootstrap). Nil
	// means single mode.
	Replicated *Replicated
}

// DefaultConfig returns limits suitable for a laptop or a small production node.
func DefaultConfig() Config {
	return Config{
		MaxPending: 100_000,
		MaxKeys:    1_000_000,
		MaxWaiters: 100_000,
	}
}

// Validate reports the first setting that cannot work, with what to do about it.
func (c Config) Validate() error {
	if c.MaxPending < 1 {
		return fmt.Errorf("max pending %d: set --max-pending to at least 1", c.MaxPending)
	}
	if c.MaxKeys < 1 {
		return fmt.Errorf("max keys %d: set --max-keys to at least 1", c.MaxKeys)
	}
	if c.MaxWaiters < 1 {
		return fmt.Errorf("max waiters %d: set --max-waiters to at least 1", c.MaxWaiters)
	}
	if r := c.Replicated; r != nil && (r.Propose == nil || r.State == nil || r.Confirm == nil) {
		return errors.New("cluster mode needs a proposer, a state reader and a leadership confirmer (Replicated.Propose, State, Confirm)")
	}
	if r := c.Replicated; r != nil && (r.ExpiryInFlight < 0 || r.ExpiryGroup < 0 || r.ExpiryGroup == 1) {
		return fmt.Errorf("expiry lane: in flight %d, group %d: use 0 for the defaults, or an in-flight count of at least 1 and a group of at least 2 commands (an expiry and its grant)", r.ExpiryInFlight, r.ExpiryGroup)
	}
	if fsm.Token(c.TokenFloor) > fsm.MaxToken {
		return fmt.Errorf("token floor %d: %w", c.TokenFloor, errFloor)
	}
	return nil
}

var errFloor = fmt.Errorf("must be at most %d (2^63-1), the largest token", fsm.MaxToken)

// The limits of the lock table are the protocol's: a key, lease or token the wire accepts is
// one the table accepts, and the other way round. These fail to compile if they drift apart
// (a negative array length).
var (
	_ [fsm.MaxKeyLen - wire.MaxKey]struct{}
	_ [wire.MaxKey - fsm.MaxKeyLen]struct{}
	_ [fsm.MaxLease - wire.MaxLease]struct{}
	_ [wire.MaxLease - fsm.MaxLease]struct{}
	_ [uint64(fsm.MaxToken) - wire.MaxToken]struct{}
	_ [wire.MaxToken - uint64(fsm.MaxToken)]struct{}
)
