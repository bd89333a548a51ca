package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/wire"
)

// conn is one handshaken connection of the pool. Its writer runs in the slot's goroutine and
// takes calls from the shared queue; its reader runs in its own goroutine and hands each
// answer to the call with the same owner. A conn that dies is never reused; its slot dials a
// new one.
type conn struct {
	cl     *Client
	server int // index in Config.Servers
	addr   string
	nc     net.Conn
	fr     *frameReader
	leases bool          // protocol revision 2 is in force (wire.FlagLeases echoed); set before serve
	wake   chan struct{} // a push to the queue, or a health ping is due
	closed chan struct{} // closed by close

	readSeen atomic.Bool // a frame was read since the last ping tick
	pingDue  atomic.Bool // the writer should send a health ping

	// turn is held by whoever takes calls from the queue and writes them on this connection:
	// its writer goroutine, or a submitting caller that found the connection idle (the
	// inline path, which saves a goroutine hand-off per request).
	turn  sync.Mutex
	batch []*call // the calls being written; guarded by turn

	mu       sync.Mutex
	pending  map[uint64]*call // handed to this connection and not yet answered
	inWrite  []*call          // the batch whose Write has not returned; close leaves them to the writer
	dead     bool
	retiring bool // answered E unavailable: take nothing new, close once pending is empty
	pinging  bool // a health ping is outstanding
	pingStop func() bool
	wbuf     []byte
	starts   []int
}

func newConn(cl *Client, server int, nc net.Conn, fr *frameReader) *conn {
	return &conn{
		cl: cl, server: server, addr: cl.cfg.Servers[server], nc: nc, fr: fr,
		wake:    make(chan struct{}, 1),
		closed:  make(chan struct{}),
		pending: map[uint64]*call{},
		wbuf:    make([]byte, 0, wire.ReplyBatch*wire.MaxFrame),
		batch:   make([]*call, 0, wire.ReplyBatch),
	}
}

// serve runs the connection until it dies: the reader in a new goroutine, the writer here.
func (cn *conn) serve() {
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		cn.readLoop()
	}()
	cn.armPing()
	cn.writeLoop()
	<-readDone
}

// writeLoop writes queued calls in batches until the connection closes.
func (cn *conn) writeLoop() {
	q := cn.cl.q
	q.register(cn, cn.wake)
	defer q.unregister(cn)
	select { // the queue may hold calls already
	case cn.wake <- struct{}{}:
	default:
	}
	for {
		select {
		case <-cn.closed:
			return
		case <-cn.wake:
		}
		cn.turn.Lock() // the ping shares the write buffer with the inline path
		ok := !cn.pingDue.Swap(false) || cn.sendPing()
		ok = ok && cn.drain()
		cn.turn.Unlock()
		if !ok {
			return
		}
	}
}

// drain writes queued calls in batches until the queue has nothing this connection may send,
// or the connection retires. It reports false when the connection died. cn.turn is held.
func (cn *conn) drain() bool {
	for {
		cn.mu.Lock()
		stop := cn.retiring || cn.dead
		cn.mu.Unlock()
		if stop {
			return true
		}
		cn.batch = cn.cl.take(cn, cn.batch[:0])
		if len(cn.batch) == 0 {
			return true
		}
		if !cn.write(cn.batch) {
			return false
		}
	}
}

// write sends one batch. The calls are registered as pending before the bytes go out, so an
// answer can never outrun its registration. A call none of whose bytes reached the socket is
// unsent and goes back to the queue (another connection may send it, with the same owner);
// a call with any byte written may have been sent and is never written again.
func (cn *conn) write(batch []*call) bool {
	cn.mu.Lock()
	if cn.dead {
		cn.mu.Unlock()
		for _, c := range batch {
			cn.cl.requeue(c, cn, requeueUnsent, nil)
		}
		return false
	}
	for _, c := range batch {
		cn.pending[c.owner] = c
	}
	cn.inWrite = batch
	cn.mu.Unlock()

	buf, starts := cn.wbuf[:0], cn.starts[:0]
	for _, c := range batch {
		starts = append(starts, len(buf))
		buf = wire.AppendRequest(buf, c.frame())
		if c.ext != nil {
			c.ext.tk.writing(c, c.writtenAt.Add(c.ext.span)) // before any byte of it may reach the server
		}
	}
	cn.wbuf, cn.starts = buf, starts
	// A write that blocks (the peer reads nothing) ends by the first answer deadline in the
	// batch, as that call's timer would end it (closing the connection), or at the stall bound.
	// This also bounds an inline write, made on the caller's goroutine before its timer runs;
	// a cancellation during such a write takes effect when the write ends (watching the
	// context there would cost every acquire a registration, for a socket buffer that is full).
	left := writeStallTimeout
	for _, c := range batch {
		left = min(left, c.answerBy.Sub(c.writtenAt))
	}
	cn.nc.SetWriteDeadline(time.Now().Add(left))
	n, err := cn.nc.Write(buf)

	cn.mu.Lock()
	cn.inWrite = nil
	dead := cn.dead
	cn.mu.Unlock()
	if err == nil && !dead {
		cn.closeIfRetired() // an answer may have retired it while the batch was being written
		return true
	}
	if err == nil {
		err = errors.New("connection closed during the write")
	}
	for i, c := range batch {
		cn.forget(c.owner)
		if err != nil && starts[i] >= n {
			cn.cl.requeue(c, cn, requeueUnsent, err)
		} else {
			cn.cl.lost(c, cn, err)
		}
	}
	cn.close(fmt.Errorf("write: %w", err))
	return false
}

// frame is the request to write for c, stamped by take.
func (c *call) frame() *wire.Request {
	switch c.kind {
	case kindAcquire:
		return &wire.Request{Op: wire.OpAcquire, Owner: c.owner, Wait: c.stamped, Lease: c.lease, Key: []byte(c.key)}
	case kindRelease:
		return &wire.Request{Op: wire.OpRelease, Owner: c.owner, Token: c.token, Key: []byte(c.key)}
	case kindExtend:
		return &wire.Request{Op: wire.OpExtend, Owner: c.owner, Token: c.token, Lease: c.lease, Key: []byte(c.key)}
	}
	return &wire.Request{Op: wire.OpPing, Owner: c.owner}
}

// readLoop hands every answer to its call until the connection fails.
func (cn *conn) readLoop() {
	for {
		resp, err := cn.fr.next()
		if err != nil {
			cn.close(err)
			return
		}
		cn.readSeen.Store(true)
		if resp.Owner == 0 {
			// E with owner 0: the server is closing the connection (section 5).
			if resp.Op == wire.OpError {
				cn.close(fmt.Errorf("server closes the connection: %w", &ServerError{Reason: resp.Reason}))
			} else {
				cn.close(fmt.Errorf("%w: %s frame with owner 0", errProtocol, resp.Op))
			}
			return
		}
		c := cn.forget(resp.Owner)
		if c == nil {
			cn.cl.st.unknownResponses.Add(1)
			cn.cl.log.Warn("latch client: ignoring an answer for an unknown owner", "server", cn.addr, "op", resp.Op.String(), "owner", resp.Owner)
			continue
		}
		cn.cl.deliver(c, cn, resp)
		cn.closeIfRetired()
	}
}

// forget removes and returns the pending call with owner, if any.
func (cn *conn) forget(owner uint64) *call {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	c := cn.pending[owner]
	delete(cn.pending, owner)
	return c
}

// retire stops the connection taking new calls, after its server answered E unavailable; it
// closes once its pending calls are answered, and its slot then dials the next server.
func (cn *conn) retire() {
	cn.mu.Lock()
	cn.retiring = true
	cn.mu.Unlock()
	cn.closeIfRetired()
}

func (cn *conn) closeIfRetired() {
	cn.mu.Lock()
	idle := cn.retiring && len(cn.pending) == 0 && cn.inWrite == nil
	cn.mu.Unlock()
	if idle {
		cn.close(errRetired)
	}
}

// close ends the connection once: every call pending on it (except a batch being written,
// which its writer settles) lost its connection after it may have been sent.
func (cn *conn) close(cause error) {
	cn.mu.Lock()
	if cn.dead {
		cn.mu.Unlock()
		return
	}
	cn.dead = true
	var lost []*call
	for owner, c := range cn.pending {
		if !cn.inWriteLocked(c) {
			lost = append(lost, c)
			delete(cn.pending, owner)
		}
	}
	stopPing := cn.pingStop
	cn.mu.Unlock()
	close(cn.closed)
	cn.nc.Close()
	if stopPing != nil {
		stopPing()
	}
	if errors.Is(cause, errRetired) {
		cn.cl.log.Debug("latch client: connection retired", "server", cn.addr)
	} else {
		cn.cl.log.Info("latch client: connection closed", "server", cn.addr, "cause", cause)
	}
	for _, c := range lost {
		cn.cl.lost(c, cn, cause)
	}
}

func (cn *conn) inWriteLocked(c *call) bool {
	for _, w := range cn.inWrite {
		if w == c {
			return true
		}
	}
	return false
}

// armPing schedules the next health tick: a connection on which nothing was read for a whole
// PingInterval gets a ping, which must be answered within ioTimeout.
func (cn *conn) armPing() {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.dead {
		return
	}
	cn.pingStop = cn.cl.clock.AfterFunc(cn.cl.cfg.PingInterval, func() {
		cn.armPing()
		if !cn.readSeen.Swap(false) {
			cn.pingDue.Store(true)
			select {
			case cn.wake <- struct{}{}:
			default:
			}
		}
	})
}

// sendPing writes a health ping on this connection (from the writer goroutine). cn.turn is
// held.
func (cn *conn) sendPing() bool {
	cl := cn.cl
	cn.mu.Lock()
	busy := cn.pinging
	cn.pinging = true
	cn.mu.Unlock()
	if busy {
		return true
	}
	owner, ok := cl.owners.take()
	if !ok {
		return true // failing closed: nothing is sent any more
	}
	now := cl.clock.Now()
	c := newCall(kindPing, owner, now.Add(ioTimeout))
	c.health = true
	c.state, c.cn, c.writtenAt, c.answerBy = stateSending, cn, now, c.deadline
	cl.clock.AfterFunc(ioTimeout, func() {
		c.mu.Lock()
		late := c.state == stateSending
		if late {
			c.finishLocked(wire.Response{}, errPingTimeout)
		}
		c.mu.Unlock()
		if late {
			cn.close(errPingTimeout)
		}
	})
	return cn.write([]*call{c})
}

// pingAnswered clears the outstanding health ping.
func (cn *conn) pingAnswered() {
	cn.mu.Lock()
	cn.pinging = false
	cn.mu.Unlock()
}

// frameReader reads response frames from a connection through a wire decoder, keeping the
// bytes of a read that hold more than one frame.
type frameReader struct {
	r   io.Reader
	dec *wire.Decoder
	buf []byte
	p   []byte
	err error
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, dec: wire.NewResponseDecoder(), buf: make([]byte, wire.ReadBuffer)}
}

// next returns the next response (a copy), or the error that ended the stream. A structural
// error in the server's bytes is returned wrapped in errProtocol: the framing is lost.
func (fr *frameReader) next() (wire.Response, error) {
	for {
		for len(fr.p) > 0 {
			n, done, err := fr.dec.Decode(fr.p)
			fr.p = fr.p[n:]
			if err != nil {
				return wire.Response{}, fmt.Errorf("%w: %w", errProtocol, err)
			}
			if done {
				return *fr.dec.Response(), nil
			}
		}
		if fr.err != nil {
			if fr.err == io.EOF && fr.dec.Partial() {
				return wire.Response{}, fmt.Errorf("%w: stream ended inside a frame", errProtocol)
			}
			return wire.Response{}, fr.err
		}
		n, err := fr.r.Read(fr.buf)
		fr.p, fr.err = fr.buf[:n], err
	}
}
