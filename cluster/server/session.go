package server

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/wire"
)

// handshake states of a session.
type state uint8

const (
	awaitHello state = iota // nothing but H is accepted
	awaitProof              // H answered with auth required: V is expected
	ready                   // requests are served
)

// evictedWhy is the log detail of a session evicted from the handshake.
const evictedWhy = "evicted from the handshake to make room for a new connection (connection limit)"

// lingerTimeout bounds how long a closing session reads (and discards) what the client still
// sends, so that its last reply is not destroyed by a TCP reset.
const lingerTimeout = time.Second

// session is one client connection.
type session struct {
	srv   *Server
	nc    net.Conn
	dec   *wire.Decoder
	conn  *cluster.Session
	state state
	// peer is set for a connection from ServePeer: requests forwarded by a follower over an
	// authenticated peer link. It starts ready (no handshake) and never forwards again.
	peer bool
	// origins is set on a peer session once it has told the follower that it takes its
	// clients' addresses (cluster/origins.go); only the reader touches it.
	origins bool
	// revs are the protocol revisions in force on the connection (wire.FlagLeases or 0): set
	// by the hello (wire.EchoFlags), or by ServePeer for a forward link. The reader
	// sets it before any frame that depends on it is decoded or answered, and the writer
	// reads it (atomic: the writer may run while the hello is answered).
	revs  atomic.Uint32
	nonce [wire.NonceSize]byte // the client's hello nonce
	sn    [wire.NonceSize]byte // ours
	// lastOwner is the owner of the request frame that ended the handshake early.
	lastOwner uint64
	// stopping is set by stopReading (shutdown) and read by the reader after each batch.
	stopping atomic.Bool
	// hs is the session's place among the connections in the handshake (client sessions).
	hs hsEntry

	// Output: replies queue in pending (omu); writes are serialised by wmu. inBatch is true
	// while the reader handles one read's frames and will flush at its end itself.
	omu     sync.Mutex
	pending []wire.Response
	spare   []wire.Response
	inBatch bool
	closed  bool
	wmu     sync.Mutex
	wbuf    []byte
	wake    chan struct{}
	done    chan struct{}
}

func newSession(srv *Server, nc net.Conn, peer bool, revs uint8, via string) *session {
	ss := &session{
		srv:     srv,
		nc:      nc,
		peer:    peer,
		dec:     wire.NewRequestDecoder(),
		pending: make([]wire.Response, 0, wire.ReplyBatch),
		spare:   make([]wire.Response, 0, wire.ReplyBatch),
		wbuf:    make([]byte, 0, wire.ReplyBatch*wire.MaxFrame),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	if peer {
		ss.state = ready
		ss.setRevisions(revs)
	} else {
		ss.hs.at = time.Now()
	}
	from := nc.RemoteAddr().String()
	if !peer {
		ss.conn = srv.node.Attach(ss, from)
		return ss
	}
	if via == "" {
		via = from
	}
	ss.conn = srv.node.AttachForward(ss, "peer "+from, via) // a follower forwarding its clients' requests
	return ss
}

// Origin implements cluster.Originated: the forward link names the session's client to an
// auditing leader.
func (ss *session) Origin() *cluster.Session { return ss.conn }

// Reply implements cluster.Replier: it queues r and, unless the reader will flush at the end
// of its batch, wakes the writer. It never blocks on the network.
func (ss *session) Reply(r wire.Response) {
	ss.omu.Lock()
	if ss.closed {
		ss.omu.Unlock()
		return
	}
	ss.pending = append(ss.pending, r)
	wake := !ss.inBatch
	ss.omu.Unlock()
	if wake {
		select {
		case ss.wake <- struct{}{}:
		default:
		}
	}
}

// writeLoop flushes replies decided outside the reader's batches.
func (ss *session) writeLoop() {
	defer ss.srv.wg.Done()
	for {
		select {
		case <-ss.wake:
			if err := ss.flush(); err != nil {
				ss.nc.Close() // the reader notices and ends the session
				return
			}
		case <-ss.done:
			return
		}
	}
}

// flush writes every queued reply, at most wire.ReplyBatch frames per write.
func (ss *session) flush() error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	for {
		ss.omu.Lock()
		batch := ss.pending
		if len(batch) == 0 {
			ss.omu.Unlock()
			return nil
		}
		ss.pending, ss.spare = ss.spare[:0], nil
		ss.omu.Unlock()
		err := ss.write(batch)
		ss.omu.Lock()
		ss.spare = batch[:0]
		ss.omu.Unlock()
		if err != nil {
			return err
		}
	}
}

// setRevisions puts revs in force on the connection: the decoder accepts their frames from
// the next one on, and the writer encodes for them.
func (ss *session) setRevisions(revs uint8) {
	ss.dec.SetFlags(revs)
	ss.revs.Store(uint32(revs))
}

// leases reports whether revision 2 (grant age, extend) is in force on the connection.
func (ss *session) leases() bool { return ss.revs.Load()&wire.FlagLeases != 0 }

func (ss *session) write(batch []wire.Response) error {
	leases := ss.leases()
	for len(batch) > 0 {
		k := min(len(batch), wire.ReplyBatch)
		b := ss.wbuf[:0]
		for i := range batch[:k] {
			r := &batch[i]
			// A grant is G (with its age) on a revised connection and A on a latch/1 one,
			// whichever the node or the forward link handed over: G, L and unsupported never
			// reach a latch/1 client, whose requests cannot ask for them.
			if r.Op == wire.OpAcquire || r.Op == wire.OpGranted {
				if leases {
					r.Op = wire.OpGranted
				} else {
					r.Op, r.Age = wire.OpAcquire, 0
				}
			}
			b = wire.AppendResponse(b, r)
		}
		ss.wbuf = b
		batch = batch[k:]
		ss.nc.SetWriteDeadline(time.Now().Add(wire.WriteStallTimeout))
		if _, err := ss.nc.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func (ss *session) beginBatch() {
	ss.omu.Lock()
	ss.inBatch = true
	ss.omu.Unlock()
}

func (ss *session) endBatch() error {
	ss.omu.Lock()
	ss.inBatch = false
	ss.omu.Unlock()
	return ss.flush()
}

// evict ends a session that is still in the handshake, to make room for a newcomer: its
// reader wakes and closes it with E unavailable. hs.evicted is set already (handshakes.evict).
func (ss *session) evict() {
	ss.nc.SetReadDeadline(time.Unix(1, 0))
}

// stopReading makes a blocked Read return, so the session ends after flushing (shutdown).
// The flag covers a reader that is busy with a batch: its own SetReadDeadline after the batch
// would otherwise replace this deadline and keep it reading for as long as the client sends.
func (ss *session) stopReading() {
	ss.stopping.Store(true)
	ss.nc.SetReadDeadline(time.Now())
}

// run is the session's reader: it owns the decoder and the handshake state, and ends the
// session when the connection fails, the client breaks framing, or the server shuts down.
func (ss *session) run() {
	defer ss.srv.wg.Done()
	remote := ss.nc.RemoteAddr().String()
	log := ss.srv.log.With("remote", remote)
	log.Debug("connection opened")
	reason, why := ss.readLoop()
	switch {
	case ss.evicted():
		// Not the client's fault, and counted and logged (rate-limited) by the accept loop.
		ss.Reply(wire.Response{Op: wire.OpError, Reason: wire.ReasonUnavailable})
		log.Debug("closing connection", "reason", string(wire.ReasonUnavailable), "detail", why)
	case reason != "":
		ss.srv.m.FrameError(reason)
		ss.Reply(wire.Response{Op: wire.OpError, Reason: reason, Owner: ss.fatalOwner(reason)})
		log.Warn("closing connection", "reason", string(reason), "detail", why)
	case why != "":
		log.Debug("connection closed", "detail", why)
	}
	ss.flush()
	ss.close()
}

// fatalOwner is the owner an E that closes the connection carries: only auth_required is
// sent for a request whose owner was read; structural errors carry 0.
func (ss *session) fatalOwner(r wire.Reason) uint64 {
	if r == wire.ReasonAuthRequired {
		return ss.lastOwner
	}
	return 0
}

// evicted reports whether the accept loop evicted this session before its handshake ended.
func (ss *session) evicted() bool { return ss.hs.evicted.Load() && ss.state != ready }

// close ends the session: no more replies, the node forgets its waiters, and the socket is
// closed after a short linger so the last reply reaches the client.
func (ss *session) close() {
	// Detached first: from the moment replies are dropped, the node knows the session is
	// gone, so a grant that still arrives for it (its own, or a forwarded one: Node.Forwarded)
	// is released by the node instead of being lost with the connection.
	ss.srv.node.Detach(ss.conn)
	ss.omu.Lock()
	ss.closed = true
	ss.omu.Unlock()
	close(ss.done)
	if ss.evicted() {
		// It sent nothing, so no unread input can turn the close into a reset; and a flood
		// of evictions must not hold a descriptor each for the linger.
		ss.nc.Close()
		return
	}
	lingerClose(ss.nc)
}

// lingerClose closes nc after sending FIN and reading (and discarding) what the client still
// sends for up to lingerTimeout: closing with unread input would make the kernel send a reset,
// which can destroy the last reply before the client reads it.
func lingerClose(nc net.Conn) { lingerCloseFor(nc, lingerTimeout, 1<<20) }

// lingerCloseFor is lingerClose with its linger bounded by d and limit bytes.
func lingerCloseFor(nc net.Conn, d time.Duration, limit int64) {
	if hc, ok := nc.(interface{ CloseWrite() error }); ok { // TCP, and TLS over it
		hc.CloseWrite()
		nc.SetReadDeadline(time.Now().Add(d))
		io.Copy(io.Discard, io.LimitReader(nc, limit))
	}
	nc.Close()
}

// refuseNow answers nc E unavailable (owner 0: before the hello, the connection limit) within
// write, and closes it with a linger of at most linger (section 6).
func refuseNow(nc net.Conn, write, linger time.Duration, limit int64) {
	nc.SetWriteDeadline(time.Now().Add(write))
	nc.Write(wire.AppendResponse(nil, &wire.Response{Op: wire.OpError, Reason: wire.ReasonUnavailable}))
	lingerCloseFor(nc, linger, limit)
}

// readLoop reads and handles frames until the session must end. A non-empty reason is the
// E to send before closing; why says what happened, for the log.
func (ss *session) readLoop() (wire.Reason, string) {
	buf := make([]byte, wire.ReadBuffer)
	deadline := ss.state != ready // a read deadline is set on the connection (the handshake's, at first)
	if deadline {
		ss.nc.SetReadDeadline(ss.hs.at.Add(wire.HandshakeTimeout))
		if ss.hs.evicted.Load() { // evicted before this deadline replaced evict's
			return "", evictedWhy
		}
	}
	for {
		n, err := ss.nc.Read(buf)
		if n > 0 && ss.state != ready {
			ss.hs.spoke.Store(true)
		}
		if n > 0 {
			readAt := ss.srv.node.Now()
			ss.beginBatch()
			completed := false
			p := buf[:n]
			for len(p) > 0 {
				used, done, derr := ss.dec.Decode(p)
				p = p[used:]
				if derr != nil {
					ss.endBatch()
					return wire.ReasonBadRequest, derr.Error()
				}
				if !done {
					continue
				}
				completed = true
				if r := ss.handle(ss.dec.Request(), readAt); r != "" {
					ss.endBatch()
					return r, "handshake"
				}
			}
			if werr := ss.endBatch(); werr != nil {
				return "", "write failed: " + werr.Error()
			}
			if ss.state == ready {
				// A frame that has begun must end within the progress timeout of the read
				// that brought its first byte; idle time between frames is unlimited.
				switch {
				case ss.dec.Partial() && (completed || !deadline):
					ss.nc.SetReadDeadline(readAt.Add(wire.ProgressTimeout))
					deadline = true
				case !ss.dec.Partial() && deadline:
					ss.nc.SetReadDeadline(time.Time{})
					deadline = false
				}
			}
			if ss.stopping.Load() {
				return "", "server shutting down"
			}
		}
		if err != nil {
			return ss.readFailed(err)
		}
	}
}

// readFailed turns the read error that ended the loop into the session's last word.
func (ss *session) readFailed(err error) (wire.Reason, string) {
	if ss.srv.closing.Load() {
		return "", "server shutting down"
	}
	if ss.evicted() {
		return "", evictedWhy
	}
	timeout := errors.Is(err, os.ErrDeadlineExceeded)
	switch {
	case ss.dec.Partial() && timeout:
		return wire.ReasonBadRequest, "frame not complete within the progress timeout"
	case ss.state != ready && timeout:
		return "", "handshake not finished within " + wire.HandshakeTimeout.String()
	case ss.dec.Partial():
		return wire.ReasonBadRequest, "connection ended inside a frame: " + err.Error()
	case errors.Is(err, io.EOF):
		return "", "client closed the connection"
	}
	return "", err.Error()
}
