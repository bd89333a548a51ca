package client

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/wire"
)

// kind is what a call asks for.
type kind uint8

const (
	kindAcquire kind = iota
	kindRelease
	kindPing
	kindExtend // revision 2 only: taken only by a connection with conn.leases
)

func (k kind) String() string {
	switch k {
	case kindAcquire:
		return "acquire"
	case kindRelease:
		return "release"
	case kindExtend:
		return "extend"
	}
	return "ping"
}

// state is where a call is. Transitions (each under call.mu; those from or to queued also
// under queue.mu, which is taken first):
//
//	queued  -> sending  a writer took it, stamped it and is about to write it
//	sending -> queued   none of its bytes was written, or its answer allows a resend
//	queued  -> done     deadline, cancellation or close while unsent
//	sending -> done     an answer, a lost connection, or the answer deadline
type state uint8

const (
	stateQueued state = iota
	stateSending
	stateDone
)

// call is one request from the moment it is queued until its result. The caller's goroutine
// waits for done; writers, readers and timers move it between states. Its small fields are
// packed together: every acquire and release allocates one.
type call struct {
	kind     kind
	wait0    bool   // acquire asked with wait 0: sent as 0, bounded by ioTimeout
	ctxBound bool   // the caller's context deadline is the operation deadline
	bounded  bool   // counts against Config.QueueSize
	health   bool   // a connection's own health ping
	lease    uint16 // acquire, extend
	owner    uint64
	key      string
	token    uint64      // release, extend
	ext      *extendCall // extend only
	deadline time.Time   // set by prepare; an extend's is shortened when written (stampLocked)

	// Queue links, guarded by queue.mu.
	prev, next *call
	inQueue    bool

	mu        sync.Mutex
	state     state
	stamped   uint8         // sending, acquire: the wait written into the frame
	sent      bool          // some attempt may have reached a server
	cn        *conn         // sending: the connection it was handed to
	writtenAt time.Time     // sending: when the writer stamped it, just before writing
	answerBy  time.Time     // sending: when the caller gives up waiting for its answer
	avoid     map[int]bool  // servers that answered E unavailable during this call
	retryAt   time.Time     // real time: before it, servers in avoid are not asked again
	backoff   time.Duration // the last retry backoff after E unavailable
	attempts  int
	seen      time.Duration // G or L answer: from writtenAt to the read of the answer
	res       wire.Response
	err       error
	done      chan struct{}
}

// extendCall is what an extend call carries besides a release's fields: its ticket, how long
// its lease holds at least from a write (leaseSpan), and, guarded by call.mu, the write of its
// first attempt that may have been applied (one lost with its connection, or answered E
// indeterminate).
type extendCall struct {
	tk      *Ticket
	span    time.Duration
	maybeAt time.Time
}

func newCall(k kind, owner uint64, deadline time.Time) *call {
	return &call{kind: k, owner: owner, deadline: deadline, done: make(chan struct{})}
}

// finishLocked records the result and wakes the waiting caller. c.mu is held.
func (c *call) finishLocked(res wire.Response, err error) {
	c.state = stateDone
	c.res, c.err = res, err
	c.cn = nil
	close(c.done)
}

// dueLocked returns when c's timer settles it in its state: the deadline while queued, the
// answer deadline while sending; false once done. c.mu is held.
func (c *call) dueLocked() (time.Time, bool) {
	switch c.state {
	case stateQueued:
		return c.deadline, true
	case stateSending:
		return c.answerBy, true
	}
	return time.Time{}, false
}

// result returns the outcome once done is closed.
func (c *call) result() (wire.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res, c.err
}

// owners hands out distinct non-zero owners. It never wraps: once the counter would reach 0
// again it stays exhausted and the client fails closed.
type owners struct {
	next atomic.Uint64 // 0 once exhausted
}

func (o *owners) take() (uint64, bool) {
	for {
		v := o.next.Load()
		if v == 0 {
			return 0, false
		}
		if o.next.CompareAndSwap(v, v+1) { // v+1 is 0 after 2^64-1: exhausted from then on
			return v, true
		}
	}
}

func (o *owners) exhausted() bool { return o.next.Load() == 0 }
