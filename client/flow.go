package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/latchd/latch/wire"
)

// This file moves calls between their states (see state): queueing, taking and stamping,
// answers, lost connections, deadlines and cancellation. Every transition rechecks the state
// under the call's mutex, so whichever event comes first decides and the others do nothing.

// submit queues c, or says why it cannot be: the client is closed, every server refused the
// handshake, or the queue is full. Nothing is sent in those cases.
//
// When a connection is idle the caller writes the queue out on it itself (the inline path):
// the request then costs no hand-off to the writer goroutine. The write is the same code the
// writer runs, under the same turn, so stamping, registration and the unsent/maybe-sent split
// are unchanged; it only blocks when the socket does, which the write-stall bound limits.
func (cl *Client) submit(c *call, internal bool) error {
	q := cl.q
	q.mu.Lock()
	switch {
	case q.hardClosed || (q.closed && !internal):
		q.mu.Unlock()
		return ErrClosed
	case cl.authDown.Load():
		q.mu.Unlock()
		return cl.authError()
	case c.bounded && q.bounded >= q.limit:
		q.mu.Unlock()
		return fmt.Errorf("%w (%d requests wait for a connection)", ErrQueueFull, q.bounded)
	}
	c.mu.Lock()
	q.linkLocked(c, false)
	c.mu.Unlock()
	cn := q.idleLocked()
	if cn == nil {
		q.wakeLocked() // every connection is writing: its writer takes c next
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()
	ok := cn.drain()
	cn.turn.Unlock()
	if !ok || q.len() > 0 {
		// The connection died or retired, or calls it may not send are left: let every
		// writer look (the dead one's slot dials a replacement).
		q.mu.Lock()
		q.wakeLocked()
		q.mu.Unlock()
	}
	return nil
}

// take hands the writer of cn the calls it may send now, in queue order, at most
// wire.ReplyBatch: it skips calls whose server cn answered E unavailable until their retry
// backoff has passed, and extends when cn does not carry revision 2 (if no connection of the
// pool does, it finishes them: unsupported, nothing sent), finishes calls whose deadline has
// passed (they were never sent), and stamps the rest just before the write.
func (cl *Client) take(cn *conn, out []*call) []*call {
	q := cl.q
	now, realNow := cl.clock.Now(), time.Now()
	revised := -1 // whether a connection carries revision 2: looked up at the first extend
	q.mu.Lock()
	defer q.mu.Unlock()
	for c := q.head; c != nil && len(out) < wire.ReplyBatch; {
		next := c.next
		if c.kind == kindExtend && !cn.leases && revised < 0 {
			revised = 0
			if cl.anyRevised() {
				revised = 1
			}
		}
		c.mu.Lock()
		if c.avoid[cn.server] && realNow.Before(c.retryAt) || c.kind == kindExtend && !cn.leases && revised == 1 {
			c.mu.Unlock()
			c = next
			continue
		}
		q.removeLocked(c)
		if c.kind == kindExtend && !cn.leases {
			c.finishLocked(wire.Response{}, unsupportedErr(c))
		} else if !now.Before(c.deadline) {
			c.finishLocked(wire.Response{}, cl.unsentErr(c))
		} else {
			c.stampLocked(cn, now)
			out = append(out, c)
		}
		c.mu.Unlock()
		c = next
	}
	return out
}

// stampLocked moves c to sending on cn at now. An acquire's wait becomes the time left until
// its operation deadline rounded up (0 stays 0), and its answer is awaited until the server's
// own wait can have ended plus ReplyGrace; every other call is awaited until its deadline.
func (c *call) stampLocked(cn *conn, now time.Time) {
	c.state, c.cn, c.writtenAt = stateSending, cn, now
	c.attempts++
	if c.kind == kindExtend {
		// Once written it may be applied, and a shorter lease shortens the lock: the ticket's
		// deadline is now at most now + span, and no attempt may be sent after that.
		if end := now.Add(c.ext.span); end.Before(c.deadline) {
			c.deadline = end
		}
	}
	c.answerBy = c.deadline
	if c.kind == kindAcquire && !c.wait0 {
		w, _ := wire.StampWait(c.deadline.Sub(now), wire.MaxWait) // now is before the deadline
		c.stamped = w
		c.answerBy = now.Add(time.Duration(w)*time.Second + ReplyGrace)
	}
}

// requeue reasons.
type requeueHow uint8

const (
	requeueUnsent      requeueHow = iota // none of its bytes was written
	requeueUnavailable                   // answered E unavailable: not applied; retry after a backoff
	requeueResend                        // a release or ping that may have been sent: send again
)

// Retry backoff (real time) of a call answered E unavailable: the server that said so, and
// every other that said so before in the same call, is asked again only after it. It starts
// at retryMin and doubles up to retryMax, each drawn from its upper half (jitter), so that a
// call rides through a leader election within its deadline without hammering the servers.
// Servers that have not refused the call are asked at once.
const (
	retryMin = 50 * time.Millisecond
	retryMax = time.Second
)

// requeue puts a call that cn held back at the front of the queue, if its deadline allows;
// otherwise it finishes it. An acquire that may have been sent never comes here.
func (cl *Client) requeue(c *call, cn *conn, how requeueHow, cause error) {
	q := cl.q
	q.mu.Lock()
	defer q.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateSending || c.cn != cn {
		return
	}
	var retryIn time.Duration
	switch how {
	case requeueUnavailable:
		if c.avoid == nil {
			c.avoid = map[int]bool{}
		}
		c.avoid[cn.server] = true
		c.backoff = min(max(2*c.backoff, retryMin), retryMax)
		retryIn = c.backoff/2 + rand.N(c.backoff/2+1)
		c.retryAt = time.Now().Add(retryIn)
	case requeueResend:
		c.sent = true
		if c.ext != nil && c.ext.maybeAt.IsZero() {
			c.ext.maybeAt = c.writtenAt
		}
	}
	switch {
	case c.health:
		c.finishLocked(wire.Response{}, fmt.Errorf("%w: %v", errPingTimeout, cause))
		return
	case q.hardClosed:
		c.finishLocked(wire.Response{}, cl.closedErr(c))
		return
	case !cl.clock.Now().Before(c.deadline):
		c.finishLocked(wire.Response{}, cl.unsentErr(c))
		return
	}
	q.pushLocked(c, true)
	if retryIn > 0 {
		// Writers skip it until then: wake them when the backoff is over.
		time.AfterFunc(retryIn, func() {
			q.mu.Lock()
			q.wakeLocked()
			q.mu.Unlock()
		})
	}
	cl.st.failovers.Add(1)
	cl.log.Debug("latch client: request goes back to the queue", "op", c.kind.String(), "owner", c.owner, "server", cn.addr, "cause", cause, "retry_in", retryIn)
}

// lost settles a call whose connection ended after it may have been sent: an acquire is
// Indeterminate (never sent again); a release or ping is sent again if time is left.
func (cl *Client) lost(c *call, cn *conn, cause error) {
	if c.kind != kindAcquire && !c.health {
		cl.requeue(c, cn, requeueResend, cause)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateSending || c.cn != cn {
		return
	}
	if c.health {
		c.finishLocked(wire.Response{}, fmt.Errorf("%w: %v", errPingTimeout, cause))
		return
	}
	c.finishLocked(wire.Response{}, fmt.Errorf("%w: connection to %s lost after the acquire may have been sent: %v", ErrIndeterminate, cn.addr, cause))
}

// op is the request op of a kind of call, for wire.Answers.
func (k kind) op() wire.Op {
	switch k {
	case kindAcquire:
		return wire.OpAcquire
	case kindRelease:
		return wire.OpRelease
	case kindExtend:
		return wire.OpExtend
	}
	return wire.OpPing
}

// deliver hands an answer read on cn to its call.
func (cl *Client) deliver(c *call, cn *conn, resp wire.Response) {
	if c.health {
		cn.pingAnswered()
	}
	if resp.Op == wire.OpError && !c.health {
		switch resp.Reason {
		case wire.ReasonUnavailable:
			// Definitely not applied: another server may take it within the deadline. This
			// server cannot serve now (no leader, shutting down): send it nothing new.
			cn.retire()
			cl.requeue(c, cn, requeueUnavailable, &ServerError{Reason: resp.Reason})
			return
		case wire.ReasonIndeterminate:
			if c.kind != kindAcquire {
				cl.requeue(c, cn, requeueResend, &ServerError{Reason: resp.Reason})
				return
			}
		}
	}
	grant := resp.Op == wire.OpAcquire || resp.Op == wire.OpGranted
	bad := !wire.Answers(c.kind.op(), resp.Op) || grant && (resp.Token == 0 || resp.Token > wire.MaxToken)
	var readAt time.Time
	if resp.Op == wire.OpGranted || resp.Op == wire.OpExtend {
		readAt = cl.clock.Now() // an age, or an extension, is checked against what the client saw
	}
	c.mu.Lock()
	if c.state != stateSending || c.cn != cn {
		c.mu.Unlock()
		return
	}
	if bad {
		err := fmt.Errorf("%w: %w: %s answered %s (token %d) to a %s", ErrIndeterminate, errProtocol, cn.addr, resp.Op, resp.Token, c.kind)
		c.finishLocked(wire.Response{}, err)
		c.mu.Unlock()
		cn.close(err)
		return
	}
	if !readAt.IsZero() {
		c.seen = readAt.Sub(c.writtenAt)
	}
	c.finishLocked(resp, nil)
	c.mu.Unlock()
}

// await blocks until c is done. Its timer fires at the operation deadline and, for a call
// that may have been sent, again at its answer deadline; a canceled ctx ends it at once.
// A ctx deadline was folded into c.deadline by prepare, so only cancellation counts here.
func (cl *Client) await(ctx context.Context, c *call) {
	fire := make(chan struct{}, 1)
	arm := func(at time.Time) func() bool {
		return cl.clock.AfterFunc(at.Sub(cl.clock.Now()), func() {
			select {
			case fire <- struct{}{}:
			default:
			}
		})
	}
	stop := arm(c.deadline)
	defer func() { stop() }()
	ctxDone := ctx.Done()
	for {
		select {
		case <-c.done:
			return
		case <-fire:
			if next, again := cl.expire(c); again {
				stop()
				stop = arm(next)
			}
		case <-ctxDone:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				ctxDone = nil // the deadline is c.deadline's business
				continue
			}
			cl.cancelCall(ctx, c)
			ctxDone = nil
		}
	}
}

// expire handles c's timer: unsent at the deadline is a definite timeout; sent and not
// answered by its answer deadline closes exactly that connection and is Indeterminate.
// It returns when to look again, if the call is not settled yet.
func (cl *Client) expire(c *call) (time.Time, bool) {
	now := cl.clock.Now()
	q := cl.q
	q.mu.Lock()
	c.mu.Lock()
	if at, ok := c.dueLocked(); ok && now.Before(at) {
		c.mu.Unlock()
		q.mu.Unlock()
		return at, true
	}
	var closeConn *conn
	switch c.state {
	case stateQueued:
		q.removeLocked(c)
		c.finishLocked(wire.Response{}, cl.unsentErr(c))
	case stateSending:
		closeConn = c.cn
		c.finishLocked(wire.Response{}, cl.noAnswerErr(c, closeConn))
	}
	c.mu.Unlock()
	q.mu.Unlock()
	if closeConn != nil {
		closeConn.forget(c.owner)
		closeConn.close(fmt.Errorf("no answer to %s (owner %d) by its deadline", c.kind, c.owner))
	}
	return time.Time{}, false
}

// cancelCall ends c for a canceled context: unsent, it is a definite no; possibly sent, it is
// Indeterminate, and an acquire's connection is closed so that the server drops its waiter.
func (cl *Client) cancelCall(ctx context.Context, c *call) {
	q := cl.q
	q.mu.Lock()
	c.mu.Lock()
	var cn *conn
	switch c.state {
	case stateQueued:
		q.removeLocked(c)
		if c.sent {
			c.finishLocked(wire.Response{}, fmt.Errorf("%w: canceled after an earlier attempt may have been sent: %w", ErrIndeterminate, context.Cause(ctx)))
		} else {
			c.finishLocked(wire.Response{}, fmt.Errorf("%w: %w", ErrCanceled, context.Cause(ctx)))
		}
	case stateSending:
		cn = c.cn
		c.finishLocked(wire.Response{}, fmt.Errorf("%w: canceled after the %s may have been sent: %w", ErrIndeterminate, c.kind, context.Cause(ctx)))
	}
	c.mu.Unlock()
	q.mu.Unlock()
	if cn != nil {
		cn.forget(c.owner)
		if c.kind == kindAcquire {
			cn.close(fmt.Errorf("acquire (owner %d) canceled by its caller", c.owner))
		}
	}
}

// unsentErr is the result of a call that was not sent, or whose attempts were all refused,
// when its time is up. c.mu is held.
func (cl *Client) unsentErr(c *call) error {
	switch {
	case c.sent:
		return fmt.Errorf("%w: no answer to the %s before its deadline after an earlier attempt may have been sent", ErrIndeterminate, c.kind)
	case len(c.avoid) > 0 || cl.connError() != nil:
		// No server took it during the whole call: still a definite no, and also unavailable.
		return &unreachableError{kind: c.kind, refused: len(c.avoid) > 0, ctxBound: c.ctxBound, tried: cl.tried(c.avoid)}
	}
	why := "still queued at the deadline: the connections were busy"
	if c.ctxBound {
		why += " (the context's deadline)"
	}
	switch {
	case c.kind == kindAcquire && c.ctxBound:
		return fmt.Errorf("%w: not acquired (guaranteed unsent: %s); retry later: %w", ErrTimeout, why, context.DeadlineExceeded)
	case c.kind == kindAcquire:
		return fmt.Errorf("%w: not acquired (guaranteed unsent: %s); retry later", ErrTimeout, why)
	case c.kind == kindRelease:
		return fmt.Errorf("%w: release not sent (guaranteed unsent: %s); the lock, if still held, ends with its lease", ErrTimeout, why)
	case c.kind == kindExtend:
		return fmt.Errorf("%w: extend not sent (guaranteed unsent: %s); the ticket's deadline stands", ErrTimeout, why)
	}
	return fmt.Errorf("%w: ping not sent (%s)", ErrTimeout, why)
}

// unsupportedErr is the result of an extend that no connection of the pool can carry: none
// has revision 2 in force. c.mu is held.
func unsupportedErr(c *call) error {
	if c.sent {
		return fmt.Errorf("%w: an earlier attempt of the extend may have been sent, and no connection carries protocol revision 2 now to send it again", ErrIndeterminate)
	}
	return fmt.Errorf("%w: no connection of the pool carries protocol revision 2 (its servers do not offer it); nothing was sent", ErrUnsupported)
}

// noAnswerErr is the result of a call that may have been sent and got no answer in time.
func (cl *Client) noAnswerErr(c *call, cn *conn) error {
	if c.kind == kindPing {
		return fmt.Errorf("%w: no pong from %s in time; the connection was closed", ErrTimeout, cn.addr)
	}
	return fmt.Errorf("%w: no answer from %s to the %s by its deadline; the connection was closed", ErrIndeterminate, cn.addr, c.kind)
}

// closedErr is the result of a call the client's Close ended.
func (cl *Client) closedErr(c *call) error {
	if c.sent {
		return fmt.Errorf("%w: %w while the %s may have been sent", ErrIndeterminate, ErrClosed, c.kind)
	}
	return fmt.Errorf("%w (the %s was not sent)", ErrClosed, c.kind)
}
