package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/latchd/latch/wire"
)

// The pool: Config.Conns slots, each keeping one connection open. Slot i starts at server
// i mod len(Servers). A failed dial or handshake moves the slot to the next server at once;
// after a whole round of failures it backs off (real time, doubling from minBackoff to
// maxBackoff, with jitter). A connection that ends is replaced by dialing the next server, so
// a server that went away is skipped; one that ended within backoffReset of its handshake
// also costs a backoff, so a server that accepts and drops cannot make a slot spin.

// serverState is what the pool last learned about one server.
type serverState struct {
	tried   bool
	lastErr error
	authErr bool // the last attempt failed authentication
}

// runSlot keeps one connection open until Close.
func (cl *Client) runSlot(slot int) {
	defer cl.wg.Done()
	n := len(cl.cfg.Servers)
	next := slot % n
	backoff := minBackoff
	failures, connected := 0, false
	for {
		select {
		case <-cl.stop:
			return
		default:
		}
		srv := next
		next = (next + 1) % n
		cn, err := cl.connect(srv)
		if err != nil {
			if cl.ctx.Err() != nil {
				return
			}
			cl.dialFailed(srv, err)
			if failures++; failures%n == 0 {
				if !cl.sleep(backoff) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
			}
			continue
		}
		failures = 0
		if !cl.connected(srv, cn) {
			cn.nc.Close()
			return
		}
		if connected {
			cl.st.reconnects.Add(1)
		}
		connected = true
		began := time.Now()
		renew := cl.renegotiate(cn)
		cn.serve()
		if renew != nil {
			renew.Stop()
		}
		cl.pmu.Lock()
		delete(cl.conns, cn)
		if cn.leases {
			cl.revised--
		}
		cl.pmu.Unlock()
		if time.Since(began) < backoffReset {
			if !cl.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
		} else {
			backoff = minBackoff
		}
	}
}

// renegotiateAfter is how long a latch/1 connection of a client that offers revision 2 lives
// before it is retired (it takes no new call, closes once its calls are answered, and its
// slot dials again): a cluster switches the revision on only once every member serves it, so
// a connection made before that, or to a member upgraded since, asks again. With 50% jitter.
var renegotiateAfter = time.Minute

// renegotiate arms the retirement of cn after renegotiateAfter when cn is latch/1 and the
// client offers revision 2; nil when there is nothing to arm. Stop the timer when cn ends.
func (cl *Client) renegotiate(cn *conn) *time.Timer {
	if cn.leases || cl.cfg.Latch1Only {
		return nil
	}
	return time.AfterFunc(renegotiateAfter+rand.N(renegotiateAfter/2+1), func() {
		cl.log.Debug("latch client: retiring a latch/1 connection to offer revision 2 again", "server", cn.addr)
		cn.retire()
	})
}

// sleep waits about d (with up to 50% jitter) unless the client closes first.
func (cl *Client) sleep(d time.Duration) bool {
	d += rand.N(d/2 + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-cl.stop:
		return false
	}
}

// connected adds a new connection to the pool, unless the client is closing.
func (cl *Client) connected(srv int, cn *conn) bool {
	cl.pmu.Lock()
	defer cl.pmu.Unlock()
	select {
	case <-cl.stop:
		return false
	default:
	}
	cl.conns[cn] = struct{}{}
	if cn.leases {
		cl.revised++
	}
	cl.servers[srv] = serverState{tried: true}
	cl.authDown.Store(false)
	cl.st.connects.Add(1)
	cl.log.Debug("latch client: connected", "server", cn.addr)
	return true
}

// dialFailed records a failed dial or handshake. When every server's last attempt failed
// authentication and no connection is up, waiting cannot help: queued calls fail with the
// auth error at once, and new ones are refused until a handshake succeeds.
func (cl *Client) dialFailed(srv int, err error) {
	cl.st.dialFailures.Add(1)
	auth := errors.Is(err, ErrAuth)
	if auth {
		cl.log.Error("latch client: server refused, or failed, the handshake", "server", cl.cfg.Servers[srv], "error", err)
	} else {
		cl.log.Warn("latch client: cannot connect", "server", cl.cfg.Servers[srv], "error", err)
	}
	cl.pmu.Lock()
	cl.servers[srv] = serverState{tried: true, lastErr: err, authErr: auth}
	down := auth && len(cl.conns) == 0
	for _, s := range cl.servers {
		down = down && s.authErr
	}
	// Set under pmu, which connected holds when it clears the flag: a connection made in
	// between can never be followed by a stale "every server refused".
	was := down && cl.authDown.Swap(true)
	cl.pmu.Unlock()
	if !down || was {
		return
	}
	q := cl.q
	q.mu.Lock()
	failed := q.removeAllLocked(func(*call) bool { return true })
	authErr := cl.authError()
	q.mu.Unlock()
	cl.finishAll(failed, func(c *call) error {
		if c.sent {
			return fmt.Errorf("%w: no server accepts the handshake any more: %w", ErrIndeterminate, authErr)
		}
		return authErr
	})
}

// authError is the error for calls refused because every server refused the handshake.
func (cl *Client) authError() error {
	cl.pmu.Lock()
	defer cl.pmu.Unlock()
	for _, s := range cl.servers {
		if s.authErr {
			return fmt.Errorf("every server refused the handshake (nothing sent): %w", s.lastErr)
		}
	}
	return fmt.Errorf("every server refused the handshake (nothing sent): %w", ErrAuth)
}

// anyRevised reports whether a connection of the pool carries revision 2.
func (cl *Client) anyRevised() bool {
	cl.pmu.Lock()
	defer cl.pmu.Unlock()
	return cl.revised > 0
}

// unsupported reports whether connections are up and none carries revision 2: an extend
// would have nothing to go out on. With no connection up, nobody knows yet.
func (cl *Client) unsupported() bool {
	cl.pmu.Lock()
	defer cl.pmu.Unlock()
	return len(cl.conns) > 0 && cl.revised == 0
}

// connError is the last dial error while no connection is up, else nil.
func (cl *Client) connError() error {
	cl.pmu.Lock()
	defer cl.pmu.Unlock()
	if len(cl.conns) > 0 {
		return nil
	}
	for _, s := range cl.servers {
		if s.lastErr != nil {
			return s.lastErr
		}
	}
	return errNoConnection
}

// tried says, for each server, what it last did: answered E unavailable to this call (those
// in avoid), failed its last dial or handshake (with the error, which names it), is
// connected, or was not tried yet. It names every address of Config.Servers.
func (cl *Client) tried(avoid map[int]bool) string {
	cl.pmu.Lock()
	defer cl.pmu.Unlock()
	up := map[int]bool{}
	for cn := range cl.conns {
		up[cn.server] = true
	}
	parts := make([]string, len(cl.cfg.Servers))
	for i, addr := range cl.cfg.Servers {
		s := cl.servers[i]
		switch {
		case avoid[i]:
			parts[i] = addr + " answered E unavailable (no leader, or shutting down)"
		case s.lastErr != nil: // it names addr; a dial error names it twice
			parts[i] = strings.TrimPrefix(s.lastErr.Error(), "dial "+addr+": ")
		case up[i]:
			parts[i] = addr + " connected but did not take it in time"
		case s.tried:
			parts[i] = addr + " connected, then the connection ended"
		default:
			parts[i] = addr + " not reached yet (a dial or handshake in progress)"
		}
	}
	return strings.Join(parts, "; ")
}

func (cl *Client) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// connect dials server srv and makes the handshakes (TLS, then latch) within DialTimeout.
func (cl *Client) connect(srv int) (*conn, error) {
	addr := cl.cfg.Servers[srv]
	ctx, cancel := context.WithTimeout(cl.ctx, cl.cfg.DialTimeout)
	defer cancel()
	nc, err := cl.dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	// A timeout or Close interrupts the handshake by expiring the connection's deadline.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	if cl.cfg.TLS != nil {
		tc := tls.Client(nc, cl.tlsConfig(addr))
		if err = tc.HandshakeContext(ctx); err != nil {
			err = fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	var fr *frameReader
	var leases bool
	if err == nil {
		fr, leases, err = cl.handshake(nc, addr)
	}
	if !stop() && err == nil {
		err = fmt.Errorf("handshake with %s: %w", addr, context.Cause(ctx))
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	cn := newConn(cl, srv, nc, fr)
	cn.leases = leases
	return cn, nil
}

func (cl *Client) tlsConfig(addr string) *tls.Config {
	c := cl.cfg.TLS.Clone()
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
	}
	return c
}

// handshake makes the latch handshake of docs/protocol.md section 8 and returns the reader that
// holds whatever the server sent after it, and whether protocol revision 2 is in force. With a
// secret, a server that does not ask for auth is refused (no downgrade) and the server's proof
// must match; without one, a server that asks for auth is refused too.
//
// The hello offers revision 2 (wire.FlagLeases) unless Config.Latch1Only. The revision is in
// force when the server's hello echoes the offer (wire.AcceptFlags); the response decoder
// switches to it right after that hello, before the next frame is read (the proof decodes
// the same either way). A server that echoes an offer this client did not make breaks the
// handshake: the connection is dropped like any failed handshake. Server bits that no
// revision defines are ignored.
func (cl *Client) handshake(nc net.Conn, addr string) (*frameReader, bool, error) {
	cn, err := wire.NewNonce()
	if err != nil {
		return nil, false, fmt.Errorf("no random nonce: %w", err)
	}
	offer := uint8(wire.FlagLeases)
	if cl.cfg.Latch1Only {
		offer = 0
	}
	if _, err := nc.Write(wire.AppendRequest(nil, &wire.Request{Op: wire.OpHello, Hello: wire.Hello{Version: wire.Version, Flags: offer, Nonce: cn}})); err != nil {
		return nil, false, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	fr := newFrameReader(nc)
	h, err := handshakeFrame(fr, addr, wire.OpHello)
	if err != nil {
		return nil, false, err
	}
	if h.Hello.Version != wire.Version {
		return nil, false, fmt.Errorf("%w: %s speaks latch protocol version %d, this client %d", ErrAuth, addr, h.Hello.Version, wire.Version)
	}
	revisions, err := wire.AcceptFlags(offer, h.Hello.Flags)
	if err != nil {
		return nil, false, fmt.Errorf("handshake with %s: %w (hello flags 0x%02x, offered 0x%02x)", addr, err, h.Hello.Flags, offer)
	}
	fr.dec.SetFlags(revisions)
	leases := revisions&wire.FlagLeases != 0
	auth := h.Hello.Flags&wire.FlagAuthRequired != 0
	secret := cl.cfg.Secret
	switch {
	case secret != nil && !auth:
		return nil, false, fmt.Errorf("%w: %s does not ask for auth but this client has a secret; refusing it (no downgrade): is it the right server, started with --secret-file?", ErrAuth, addr)
	case secret == nil && auth:
		return nil, false, fmt.Errorf("%w: %s requires a secret; pass --secret-file FILE (in Go: Config.SecretFile or Config.Secret)", ErrAuth, addr)
	case !auth:
		return fr, leases, nil
	}
	sn := h.Hello.Nonce
	proof := wire.ClientProof(secret, cn, sn)
	if _, err := nc.Write(wire.AppendRequest(nil, &wire.Request{Op: wire.OpProof, Proof: proof})); err != nil {
		return nil, false, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	v, err := handshakeFrame(fr, addr, wire.OpProof)
	if err != nil {
		return nil, false, err
	}
	if !wire.ProofEqual(v.Proof, wire.ServerProof(secret, cn, sn)) {
		return nil, false, fmt.Errorf("%w: %s answered with a wrong server proof: it does not know the secret (a fake server could hand out fake tokens); not using it", ErrAuth, addr)
	}
	return fr, leases, nil
}

// refusedError is E unavailable in answer to the hello: the server did not take the
// connection. A server says that only when it is at its connection limit (it stops
// accepting when it shuts down). It is ErrUnavailable and a ServerError to errors.Is and
// errors.As, without ErrUnavailable's text about leaders.
type refusedError struct{}

func (refusedError) Error() string {
	return "the server refused the connection: it is at its connection limit (--max-conns), or its share for connections still in the handshake is full; retry later or elsewhere"
}

func (refusedError) Unwrap() error { return &ServerError{Reason: wire.ReasonUnavailable} }

// handshakeFrame reads the next handshake frame, which must be want or E.
func handshakeFrame(fr *frameReader, addr string, want wire.Op) (wire.Response, error) {
	r, err := fr.next()
	switch {
	case err != nil && errors.Is(err, errProtocol):
		return r, fmt.Errorf("handshake with %s: %w (%v)", addr, errNotLatch, err)
	case err != nil:
		return r, fmt.Errorf("handshake with %s: %w", addr, err)
	case r.Op == wire.OpError && r.Reason == wire.ReasonUnavailable:
		return r, fmt.Errorf("handshake with %s: %w", addr, refusedError{})
	case r.Op == wire.OpError:
		return r, fmt.Errorf("handshake with %s: %w", addr, &ServerError{Reason: r.Reason})
	case r.Op != want:
		return r, fmt.Errorf("handshake with %s: %w (%w: got %s, want %s)", addr, errNotLatch, errProtocol, r.Op, want)
	}
	return r, nil
}
