package forward

import (
	"context"
	"errors"
	"time"

	"github.com/latchd/latch/wire"
)

// errNilConn stands for a Dial that returned neither a connection nor an error.
var errNilConn = errors.New("dial returned no connection and no error")

// writeLoop is the link's one writer: it dials when there is no connection, writes queued
// requests in coalesced batches, and looks for overdue answers every watchInterval.
func (l *Link) writeLoop() {
	defer l.wg.Done()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
			l.watch()
		case <-l.wake:
			for l.writeSome() {
				select {
				case <-tick.C: // a steady stream of requests must not starve the watch
					l.watch()
				default:
				}
			}
		}
	}
}

// writeSome writes the next batch of queued requests, dialling the leader first when there
// is no connection. It reports whether it should be called again.
func (l *Link) writeSome() bool {
	l.mu.Lock()
	if l.closed || len(l.queue) == 0 {
		l.mu.Unlock()
		return false
	}
	c := l.cur
	if c == nil {
		leader := l.leader
		if leader == "" || l.refusing() {
			q := l.takeQueue(len(l.queue))
			l.mu.Unlock()
			answer(q, wire.ReasonUnavailable)
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.DialTimeout)
		l.cancelDial = cancel
		l.mu.Unlock()
		nc, revs, err := l.cfg.Dial(ctx, leader)
		if err == nil && nc == nil {
			err = errNilConn
		}
		origins := false
		if err == nil && l.cfg.Origins {
			if origins, err = askOrigins(ctx, nc, revs); err != nil {
				nc.Close()
				nc = nil
			}
		}
		l.mu.Lock()
		cancel()
		l.cancelDial = nil
		switch {
		case l.closed: // Close has answered the queue
			l.mu.Unlock()
			if nc != nil {
				nc.Close()
			}
			return false
		case l.leader != leader: // the leader changed while dialling: dial the new one
			l.mu.Unlock()
			if nc != nil {
				nc.Close()
			}
			return true
		case err != nil:
			if l.cfg.RedialDelay > 0 {
				l.downUntil = l.cfg.Now().Add(l.cfg.RedialDelay)
			}
			q := l.takeQueue(len(l.queue))
			l.mu.Unlock()
			l.log.Warn("cannot reach the leader's forward channel; its requests are answered unavailable",
				"leader", leader, "error", err, "requests", len(q))
			answer(q, wire.ReasonUnavailable)
			return false
		}
		c = newConn(nc, leader, revs, origins)
		l.cur = c
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		go l.read(c)
		if c.leases() {
			l.log.Debug("forward connection opened", "leader", leader, "revision", 2)
		} else {
			l.log.Info("forward connection opened in latch/1: the leader does not serve revision 2 on its forward channel "+
				"(a latch of an older version); grants through it carry no age and extends are answered unsupported", "leader", leader)
		}
	}
	batch := l.takeQueue(min(len(l.queue), maxBatch))
	l.mu.Unlock()
	l.write(c, batch)
	return true
}

// refusing reports whether a recent failed dial still answers requests at once. The caller
// holds l.mu.
func (l *Link) refusing() bool {
	return !l.downUntil.IsZero() && l.cfg.Now().Before(l.downUntil)
}

// write registers batch on c under fresh link-local owners, stamps each acquire's wait with
// the time it has left, and writes the frames at once. A request whose time ran out before it
// could be written is answered E unavailable (definitely not sent). If c is already failing
// or draining, nothing is written and the batch goes back to the head of the queue.
func (l *Link) write(c *conn, batch []*entry) {
	now, real := l.cfg.Now(), time.Now()
	b := l.wbuf[:0]
	var late, unsupported []*entry
	sent := batch[:0] // filtered in place: sent never overtakes the loop
	c.mu.Lock()
	if c.dead || c.draining {
		c.mu.Unlock()
		l.requeue(c, batch)
		return
	}
	for _, e := range batch {
		if e.op == wire.OpExtend && !c.leases() {
			unsupported = append(unsupported, e) // a latch/1 leader would close the link on it
			continue
		}
		wait, ok := e.wait, now.Before(e.unsent)
		if ok && e.op == wire.OpAcquire {
			wait, ok = stamp(e.wait, e.readAt, now)
		}
		if !ok {
			late = append(late, e)
			continue
		}
		if c.origins {
			b = c.register(b, e, &l.nextOwner) // may bind e's session first
		} else {
			l.nextOwner++
			if l.nextOwner == 0 {
				l.nextOwner = 1 // owner 0 is not an owner
			}
			e.link = l.nextOwner
		}
		e.start = len(b)
		e.answerBy = real.Add(time.Duration(wait)*time.Second + l.cfg.AnswerTimeout)
		b = wire.AppendRequest(b, &wire.Request{Op: e.op, Owner: e.link, Wait: wait, Lease: e.lease, Token: e.token, Key: e.key})
		c.inflight[e.link] = e
		sent = append(sent, e)
	}
	c.unwritten = sent
	c.mu.Unlock()
	l.wbuf = b
	answer(late, wire.ReasonUnavailable)
	answer(unsupported, wire.ReasonUnsupported)
	if len(sent) == 0 {
		return
	}
	if h := l.beforeWrite.Load(); h != nil {
		(*h)(c)
	}
	c.mu.Lock()
	dead := c.dead // failed since the batch was registered: fail answered it (never sent)
	c.unwritten = nil
	c.mu.Unlock()
	if dead {
		return
	}
	c.nc.SetWriteDeadline(real.Add(wire.WriteStallTimeout))
	n, err := c.nc.Write(b)
	if err != nil {
		// Frames that start at or after n never reached the socket: definitely not sent.
		var unsent []*entry
		for _, e := range sent {
			if e.start >= n {
				unsent = append(unsent, e)
			}
		}
		l.fail(c, "write failed: "+err.Error(), unsent)
	}
}

// watch takes every connection with an overdue answer for lost.
func (l *Link) watch() {
	now := time.Now()
	l.mu.Lock()
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		if c.overdue(now) {
			l.fail(c, "no answer within the wait plus AnswerTimeout", nil)
		} else if c.origins {
			l.forgetEnded(c)
		}
	}
}
