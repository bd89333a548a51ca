package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/internal/ratelog"
)

// channelBacklog is how many authenticated connections wait for their channel's Accept. A
// connection that finds the backlog full waits until its handshake deadline, then is closed.
const channelBacklog = 16

// Accept loop backoff after an accept error other than a closed listener (e.g. EMFILE).
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Mux is a node's peer port: it accepts TCP connections, authenticates each one in its own
// goroutine and hands it to the Listener of the channel it asked for.
//
// All methods may be called from any goroutine.
type Mux struct {
	cfg  Config
	log  hclog.Logger
	ln   net.Listener
	lns  map[byte]*listener // one per channel; fixed by Listen
	tab  *table             // connections in the handshake: who may enter, who makes room
	ctx  context.Context    // cancelled by Close; closes connections still in the handshake
	stop context.CancelFunc
	wg   sync.WaitGroup // the accept loop and every handshake goroutine

	closeOnce sync.Once
	closeErr  error

	accepted, rejected, failed, shed, evicted, dropped atomic.Uint64
	handshaking                                        atomic.Int64 // goroutines in handle
	warnLimit, shedLimit                               ratelog.PerSecond
}

// Stats counts what the Mux did with the connections it accepted.
type Stats struct {
	// Accepted connections were authenticated and handed to their channel.
	Accepted uint64
	// Rejected connections completed the exchange but were refused: wrong proof, unknown or
	// closed channel. They were told with the one-byte reject.
	Rejected uint64
	// Failed connections did not complete the handshake: TLS failed, they timed out, closed
	// or sent too little.
	Failed uint64
	// Shed connections were closed at once on arrival: their source already held
	// MaxHandshakesPerSource connections, or the table MaxHandshakes, and none of those could
	// make room (every one had spoken and was younger than FirstByteTimeout).
	Shed uint64
	// Evicted connections were closed to make room for a newcomer: they had sent nothing
	// yet, or had been in the handshake longer than FirstByteTimeout.
	Evicted uint64
	// Dropped connections were authenticated but their channel did not take them before the
	// handshake deadline, or its Listener was closed.
	Dropped uint64
	// Handshaking is the number of connections between accept and hand-off now.
	Handshaking int
}

// Listen listens on addr (host:port; port 0 picks a free one) and serves the peer port with
// cfg until Close. Connections go to the Listener of their channel; a channel whose Listener
// is never used fills its backlog and then drops what comes.
func Listen(addr string, cfg Config) (*Mux, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("peer: listen on %s: %w", addr, err)
	}
	return Serve(ln, cfg)
}

// Serve serves the peer port with cfg on ln, which it owns from then on (Close closes it),
// as Listen does on the listener it opens. A caller that must know the address before it
// can build cfg (its Advertise) opens ln first and keeps it.
func Serve(ln net.Listener, cfg Config) (*Mux, error) {
	if err := cfg.Validate(); err != nil {
		_ = ln.Close()
		return nil, err
	}
	m := &Mux{
		cfg: cfg,
		log: cfg.logger(),
		ln:  ln,
		lns: make(map[byte]*listener, len(channels)),
		tab: newTable(cfg.MaxHandshakes, cfg.maxPerSource(), cfg.firstByteTimeout()),
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	for _, ch := range channels {
		m.lns[ch] = &listener{m: m, ch: ch, q: make(chan net.Conn, channelBacklog), done: make(chan struct{})}
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr is the address the peer port listens on.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Listener returns the listener of channel ch: its Accept returns authenticated connections
// that asked for ch. Closing it stops ch only (later dials of ch are rejected); Close on the
// Mux closes all of them. It panics if ch is not one of the Channel constants.
func (m *Mux) Listener(ch byte) net.Listener {
	l, ok := m.lns[ch]
	if !ok {
		panic(fmt.Sprintf("peer: Listener(%s): %v", channelName(ch), ErrUnknownChannel))
	}
	return l
}

// Dial dials channel ch of the peer port at addr with the Mux's Config.
func (m *Mux) Dial(ctx context.Context, addr string, ch byte) (net.Conn, error) {
	return Dial(ctx, addr, ch, m.cfg)
}

// DialFallback dials channel ch of the peer port at addr with the Mux's Config, or channel
// fallback when that listener refuses ch (see the function DialFallback).
func (m *Mux) DialFallback(ctx context.Context, addr string, ch, fallback byte) (net.Conn, byte, error) {
	return DialFallback(ctx, addr, ch, fallback, m.cfg)
}

// Stats returns the counters so far.
func (m *Mux) Stats() Stats {
	return Stats{
		Accepted:    m.accepted.Load(),
		Rejected:    m.rejected.Load(),
		Failed:      m.failed.Load(),
		Shed:        m.shed.Load(),
		Evicted:     m.evicted.Load(),
		Dropped:     m.dropped.Load(),
		Handshaking: int(m.handshaking.Load()),
	}
}

// Close stops accepting, closes every channel's Listener and every connection still in the
// handshake (and those authenticated but not yet accepted), and waits for the Mux's
// goroutines to end. Connections already returned by Accept are the caller's and stay
// open. Close the Raft transport before the Mux, or its accept loop logs errors until it
// is closed.
func (m *Mux) Close() error {
	m.closeOnce.Do(func() {
		m.stop()
		m.closeErr = m.ln.Close()
		for _, l := range m.lns {
			_ = l.Close()
		}
		m.wg.Wait()
	})
	return m.closeErr
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			m.log.Error("accept failed; retrying", "error", err, "retry_in", delay)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		m.admit(c)
	}
}

// admit enters c into the handshake table and starts its handshake, or closes it; a
// connection evicted to make room for c is closed here.
func (m *Mux) admit(c net.Conn) {
	src := sourceOf(c.RemoteAddr())
	p, victim := m.tab.admit(c, src, time.Now())
	if victim != nil {
		_ = victim.conn.Close()
		m.evicted.Add(1)
		// Let the handshakes in progress run before the next eviction: under a flood from
		// a member's own address the member's fresh connection is safe only while fewer
		// than MaxHandshakesPerSource newer ones have arrived, and it needs a few turns of
		// its goroutine (hello out, channel byte in) to get off the list of silent ones.
		defer runtime.Gosched()
		if n, ok := m.shedLimit.Allow(); ok {
			m.log.Warn("handshake slots full; closed the oldest silent or stale connection to make room", "source", victim.src,
				"max_handshakes", m.cfg.MaxHandshakes, "max_handshakes_per_source", m.tab.perSource, "suppressed", n)
		}
	}
	if p == nil {
		_ = c.Close()
		m.shed.Add(1)
		if n, ok := m.shedLimit.Allow(); ok {
			m.log.Warn("handshake slots full and none can be freed; closing the new connection", "source", src,
				"max_handshakes", m.cfg.MaxHandshakes, "max_handshakes_per_source", m.tab.perSource, "suppressed", n)
		}
		return
	}
	m.handshaking.Add(1)
	m.wg.Add(1)
	go m.handle(p)
}

// handle authenticates one accepted connection and hands it to its channel. It runs in its
// own goroutine; the connection keeps its slot in the table until the handshake has ended.
func (m *Mux) handle(p *pending) {
	defer m.wg.Done()
	defer m.handshaking.Add(-1)
	raw := p.conn

	deadline := p.at.Add(m.cfg.HandshakeTimeout)
	ctx, cancel := context.WithDeadline(m.ctx, deadline)
	defer cancel()
	// Close aborts the handshake; the deadlines end a peer that is slow or silent.
	stop := context.AfterFunc(m.ctx, func() { _ = raw.Close() })
	defer stop()
	_ = raw.SetWriteDeadline(deadline)
	_ = raw.SetReadDeadline(earliest(p.at.Add(m.cfg.firstByteTimeout()), deadline))

	conn, ch, id, err := m.authenticate(ctx, &firstByte{Conn: raw, p: p, deadline: deadline})
	if !m.tab.remove(p) {
		return // evicted: admit closed raw and counted it
	}
	if err != nil {
		if !p.spoke.Load() && isTimeout(err) {
			err = fmt.Errorf("the dialer sent nothing within %v of accept (a member answers the hello at once): %w", m.cfg.firstByteTimeout(), err)
		}
		m.fail(raw, ch, err)
		return
	}
	if !stop() {
		return // Close ran and closed raw
	}
	_ = raw.SetDeadline(time.Time{})
	if !m.lns[ch].deliver(&Conn{Conn: conn, id: id}, deadline) {
		m.dropped.Add(1)
		_ = conn.Close()
		m.log.Warn("authenticated connection not taken by its channel in time; closed", "channel", channelName(ch), "remote", raw.RemoteAddr(), "peer", id.String())
		return
	}
	m.accepted.Add(1)
	m.log.Debug("connection accepted", "channel", channelName(ch), "remote", raw.RemoteAddr(), "peer", id.String())
}

// authenticate runs TLS (if configured) and the listener's side of the handshake on c and
// returns the connection to hand on (c's TLS wrapper, or the raw connection under c), its
// channel and the identity the dialer stated.
func (m *Mux) authenticate(ctx context.Context, c *firstByte) (net.Conn, byte, Identity, error) {
	if m.cfg.TLS == nil {
		ch, id, err := serveHandshake(c, m.cfg.Secrets, m.open)
		return c.Conn, ch, id, err
	}
	tc := tls.Server(c, m.cfg.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, 0, Identity{}, fmt.Errorf("TLS handshake: %w", err)
	}
	ch, id, err := serveHandshake(tc, m.cfg.Secrets, m.open)
	return tc, ch, id, err
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// fail counts and logs a connection that did not pass the handshake, and closes it.
func (m *Mux) fail(raw net.Conn, ch byte, err error) {
	_ = raw.Close()
	if m.ctx.Err() != nil {
		return // closing: not the peer's fault
	}
	switch {
	case errors.Is(err, errBadChannel), errors.Is(err, errClosedChannel), errors.Is(err, errBadProof),
		errors.Is(err, errBadIdentity), errors.Is(err, errCertIdentity):
		m.rejected.Add(1)
		if n, ok := m.warnLimit.Allow(); ok {
			m.log.Warn("connection rejected", "remote", raw.RemoteAddr(), "channel", channelName(ch), "reason", err, "suppressed", n)
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// A port probe, or a peer that gave up: not worth a warning.
		m.failed.Add(1)
		m.log.Debug("connection closed during the handshake", "remote", raw.RemoteAddr(), "error", err)
	default:
		m.failed.Add(1)
		if n, ok := m.warnLimit.Allow(); ok {
			m.log.Warn("handshake failed", "remote", raw.RemoteAddr(), "error", err, "suppressed", n)
		}
	}
}

// open reports whether channel ch's Listener still takes connections.
func (m *Mux) open(ch byte) bool {
	select {
	case <-m.lns[ch].done:
		return false
	default:
		return true
	}
}

// listener is one channel's net.Listener.
type listener struct {
	m    *Mux
	ch   byte
	q    chan net.Conn // authenticated, not yet accepted
	done chan struct{} // closed by Close
	once sync.Once
}

// Accept returns the next authenticated connection of this channel, or an error wrapping
// net.ErrClosed once the listener or the Mux is closed.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, l.closedErr()
	default:
	}
	select {
	case c := <-l.q:
		return c, nil
	case <-l.done:
		return nil, l.closedErr()
	}
}

func (l *listener) closedErr() error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.m.Addr(), Err: fmt.Errorf("peer %s channel: %w", channelName(l.ch), net.ErrClosed)}
}

// Close stops this channel: Accept returns an error, connections waiting for Accept are
// closed and later dials of the channel are rejected. It does not close the Mux.
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.drain()
	})
	return nil
}

// Addr is the peer port's address.
func (l *listener) Addr() net.Addr { return l.m.Addr() }

// deliver queues c for Accept, waiting at most until deadline for room. It reports whether c
// was queued; if not, the caller closes c.
func (l *listener) deliver(c net.Conn, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.q <- c:
		select {
		case <-l.done:
			l.drain() // Close ran between the two selects and may have missed c
		default:
		}
		return true
	case <-l.done:
		return false
	case <-t.C:
		return false
	}
}

// drain closes every queued connection.
func (l *listener) drain() {
	for {
		select {
		case c := <-l.q:
			_ = c.Close()
		default:
			return
		}
	}
}
