package server

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/internal/ratelog"
	"github.com/latchd/latch/wire"
)

// Server accepts client connections and runs one session per connection against a node.
type Server struct {
	cfg  Config
	node *cluster.Node
	log  hclog.Logger
	m    *cluster.Metrics

	mu       sync.Mutex
	ln       net.Listener
	sessions map[*session]struct{}
	closing  atomic.Bool // Drain: no new clients; sessions still read
	stopping atomic.Bool // Shutdown: sessions stop reading
	wg       sync.WaitGroup
	active   atomic.Int64 // client sessions, handshaking ones included
	hs       handshakes   // client sessions that have not finished the handshake
	limitLog ratelog.PerSecond
	fdLog    ratelog.PerSecond
	refusing chan struct{} // a slot per connection being refused (Config.MaxRefusing)
}

// New returns a server for node. Serve starts it.
func New(cfg Config, node *cluster.Node) (*Server, error) {
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = cluster.NewMetrics()
	}
	return &Server{cfg: cfg, node: node, log: cfg.Logger, m: cfg.Metrics, sessions: map[*session]struct{}{},
		refusing: make(chan struct{}, cfg.maxRefusing())}, nil
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("latch server closed")

// Serve accepts connections on ln until Shutdown. It always returns a non-nil error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	s.mu.Unlock()
	var sp spare
	defer sp.release()
	sp.open()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			fds := outOfDescriptors(err)
			if fds && s.refuseOnSpare(ln, &sp, err) {
				continue
			}
			if errors.As(err, &ne) && ne.Timeout() || fds {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				if n, ok := s.fdLog.Allow(); ok {
					s.log.Warn("accept failed; retrying", "error", err, "backoff", backoff, "suppressed", n)
				}
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if sp.open() {
			s.admit(nc)
			continue
		}
		// No spare descriptor (it could not be taken back yet): this connection is the one
		// the process has, and refusing it frees one.
		s.refuseFor(nc, "no file descriptor left for the spare", nil)
	}
}

// refuseOnSpare handles an accept that failed for want of descriptors (first): it lets the
// spare descriptor go and accepts on it (the kernel takes a descriptor before it looks for a
// connection, so this is also where the loop waits while descriptors are short). If the
// spare can be taken back with the connection open, descriptors were freed meanwhile and
// the connection is admitted; otherwise it is answered E unavailable and closed, and the
// spare taken back. It reports whether it accepted a connection.
func (s *Server) refuseOnSpare(ln net.Listener, sp *spare, first error) bool {
	if sp.f == nil {
		return false
	}
	sp.release()
	nc, err := ln.Accept()
	if err != nil {
		sp.open()
		return false
	}
	if sp.open() {
		s.admit(nc)
		return true
	}
	s.refuseFor(nc, "out of file descriptors; refusing connection (raise the open-files limit or lower --max-conns)", first)
	sp.open()
	return true
}

// refuseFor answers nc E unavailable and closes it at once, on the accept loop, counting and
// logging (once a second at most) why.
func (s *Server) refuseFor(nc net.Conn, why string, err error) {
	s.m.ConnsRefused.Inc()
	if n, ok := s.fdLog.Allow(); ok {
		s.log.Warn(why, "remote", nc.RemoteAddr().String(), "error", err, "connections", s.active.Load(), "suppressed", n)
	}
	// On the accept loop, so briefly: the client's hello may be unread, and a short linger
	// keeps the close from becoming a reset that could discard the E before it is read.
	refuseNow(nc, 100*time.Millisecond, 100*time.Millisecond, 4096)
}

// admit starts a session for nc, making room by evicting a silent handshake if MaxConns or
// MaxHandshakes is reached (Config.MaxHandshakes), or refuses nc when nothing can make room.
// A refusal and an eviction are both E unavailable (owner 0) before the handshake, which
// only a connection limit gives: the listener is closed while the server shuts down.
func (s *Server) admit(nc net.Conn) {
	full := s.active.Load() >= int64(s.cfg.MaxConns)
	if full || s.hs.len() >= s.cfg.maxHandshakes() {
		victim := s.hs.evict(time.Now())
		if victim == nil {
			s.m.ConnsRefused.Inc()
			if n, ok := s.limitLog.Allow(); ok {
				s.log.Warn("connection limit reached; refusing connection", "remote", nc.RemoteAddr().String(),
					"max_conns", s.cfg.MaxConns, "max_handshakes", s.cfg.maxHandshakes(), "in_handshake", s.hs.len(), "suppressed", n)
			}
			s.refuse(nc)
			return
		}
		victim.evict()
		s.m.ConnsRefused.Inc()
		// Let the sessions run before the next eviction: a client's fresh connection is safe
		// while fewer than MaxHandshakes newer ones have come in, and its hello may still be
		// on its way.
		defer runtime.Gosched()
		if n, ok := s.limitLog.Allow(); ok {
			s.log.Warn("connection limit reached; closing the oldest silent connection in the handshake to make room",
				"remote", victim.nc.RemoteAddr().String(), "max_conns", s.cfg.MaxConns, "max_handshakes", s.cfg.maxHandshakes(), "suppressed", n)
		}
	}
	s.start(nc, false, 0, "")
}

// ServePeer serves one connection from the forward channel of the peer port: a follower's
// link to this node. The peer port has authenticated it already, so there is no handshake:
// the session starts ready and is otherwise an ordinary session (decoding, admission,
// waiters, coalesced replies, progress timeout, write stall). Peer sessions do not count
// against MaxConns or the connections gauge; Shutdown ends them like client sessions.
// ServePeer returns at once; after Shutdown it closes nc and returns ErrServerClosed.
//
// revs are the protocol revisions the link carries (wire.FlagLeases: the follower forwards
// extends, and grants are answered G with their age; 0: latch/1): the peer port's channel
// decided them; there is no hello. via is the follower (its node ID, as its peer handshake
// stated it; "" when it stated none): when the follower names its clients to this node's
// audit trail (cluster/origins.go), their requests are audited as coming from the client's
// address through via, or through the link's address when via is "".
func (s *Server) ServePeer(nc net.Conn, revs uint8, via string) error {
	if !s.start(nc, true, revs&wire.OfferFlags, via) {
		return ErrServerClosed
	}
	return nil
}

// refuse tells a connection over the limit to go elsewhere and closes it, on a goroutine of
// its own; with MaxRefusing of them running, the accept loop waits for one to end, so that
// refusals cannot use up the process's descriptors.
func (s *Server) refuse(nc net.Conn) {
	s.refusing <- struct{}{}
	go func() {
		defer func() { <-s.refusing }()
		refuseNow(nc, time.Second, lingerTimeout, 1<<20)
	}()
}

// start runs a session for nc, unless the server is shutting down (then nc is closed and
// start reports false). A peer session is not counted as a client connection.
func (s *Server) start(nc net.Conn, peer bool, revs uint8, via string) bool {
	ss := newSession(s, nc, peer, revs, via)
	s.mu.Lock()
	// While the server drains, forwarded connections are still taken (their requests are
	// answered by the draining node); client connections are not.
	if s.stopping.Load() || !peer && s.closing.Load() {
		s.mu.Unlock()
		nc.Close()
		return false
	}
	s.sessions[ss] = struct{}{}
	s.wg.Add(2)
	s.mu.Unlock()
	if !peer {
		s.active.Add(1)
		s.m.Connections.Inc()
		s.hs.add(ss)
	}
	go ss.writeLoop()
	go func() {
		ss.run()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
		if !peer {
			s.hs.done(ss)
			s.active.Add(-1)
			s.m.Connections.Dec()
		}
	}()
	return true
}

// Addr is the listener's address (nil before Serve).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Drain begins a shutdown: the listener closes, no client connection is taken any more, and
// the node drains (every waiter, and every acquire from now on, is answered E unavailable).
// Sessions, and followers' forwarded connections, go on reading, so what they send meanwhile
// is answered instead of being lost when the connection closes. A cluster member drains,
// hands its leadership on, then calls Shutdown. Drain is idempotent.
func (s *Server) Drain() {
	s.mu.Lock()
	s.closing.Store(true)
	if s.ln != nil {
		s.ln.Close()
	}
	s.mu.Unlock()
	s.node.Drain()
}

// Shutdown drains (Drain), then stops every session reading and lets it write what it has
// queued and close. It returns when every session has ended or ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	s.mu.Lock()
	s.stopping.Store(true)
	for ss := range s.sessions {
		ss.stopReading()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for ss := range s.sessions {
			ss.nc.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}
