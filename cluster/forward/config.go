package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config configures a Link.
type Config struct {
	// Dial opens a connection to the forward channel of the node at addr (the address given
	// to SetLeader) and says which protocol revisions it carries: revs is wire.FlagLeases
	// for a channel of revision 2 (the leader answers grants G with their age and takes
	// extends), 0 for latch/1's. In production it dials the peer port through cluster/peer,
	// which authenticates the connection and selects the channel (the revised one, or the
	// latch/1 one when the leader's peer port refuses it); tests dial plain TCP. The link
	// owns the returned connection and keeps revs with it for as long as it is open. Dial is
	// called from the link's writer goroutine, one call at a time; ctx ends after
	// DialTimeout, or earlier when the leader changes or the link closes. Required.
	Dial func(ctx context.Context, addr string) (nc net.Conn, revs uint8, err error)
	// DialTimeout bounds one dial (peer handshake included).
	DialTimeout time.Duration
	// RedialDelay is how long after a failed dial requests are answered E unavailable at
	// once, without another dial, unless SetLeader names another leader first.
	RedialDelay time.Duration
	// MaxQueued is the most requests accepted and not yet written; a request over it is
	// answered E unavailable.
	MaxQueued int
	// UnsentTimeout is how long a release or a wait-0 acquire may wait to be written (while
	// the link dials, say) before it is answered E unavailable. An acquire with a wait is
	// bounded by its wait instead.
	UnsentTimeout time.Duration
	// AnswerTimeout is how long past its wait a written request may go without an answer.
	// Then the connection is taken for lost: it is closed and every request in flight on it
	// is answered E indeterminate. Keep it above the leader's own bound on a commit, so that
	// a slow leader's honest answer comes first: raftnode's ApplyTimeout bounds the enqueue
	// and, separately, the commit (2 x 10 s by default), so the default is 25 s.
	AnswerTimeout time.Duration
	// Now is the clock that stamped the readAt of each request (the follower node's Now). It
	// measures the wait left and the unsent deadlines. Nil: time.Now.
	Now func() time.Time
	// Logger receives one line per connection event. Nil: no logging.
	Logger hclog.Logger
	// Origins: on each new connection, before any request, ask the leader whether it wants
	// the clients' addresses for its audit trail (cluster/origins.go; one ping and its
	// answer, within DialTimeout); when it does, name each client session to it once per
	// connection. A leader of an older latch, or one that does not audit, says no, and the
	// connection carries exactly what it would without Origins.
	Origins bool
}

// DefaultConfig returns the defaults for every field but Dial.
func DefaultConfig() Config {
	return Config{
		DialTimeout:   5 * time.Second,
		RedialDelay:   200 * time.Millisecond,
		MaxQueued:     16384,
		UnsentTimeout: 5 * time.Second,
		AnswerTimeout: 25 * time.Second,
	}
}

// ErrNoDial is returned by Validate for a Config without a Dial function.
var ErrNoDial = errors.New("forward: Config.Dial is nil; give the link a function that dials the leader's forward channel")

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.Dial == nil {
		return ErrNoDial
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"DialTimeout", c.DialTimeout}, {"UnsentTimeout", c.UnsentTimeout}, {"AnswerTimeout", c.AnswerTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("forward: %s is %v; it must be positive (see DefaultConfig)", d.name, d.v)
		}
	}
	if c.RedialDelay < 0 {
		return fmt.Errorf("forward: RedialDelay is %v; it must not be negative", c.RedialDelay)
	}
	if c.MaxQueued < 1 {
		return fmt.Errorf("forward: MaxQueued is %d; it must be at least 1", c.MaxQueued)
	}
	return nil
}
