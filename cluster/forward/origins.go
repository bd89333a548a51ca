package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/wire"
)

// Origins (Config.Origins; the exchange is in cluster/origins.go): a connection whose leader
// said yes to the probe names each client session to it once, with a bind frame written just
// before the session's first request on that connection, and writes every request with an
// owner that carries the session's origin id. The writer forgets a session (a forget frame)
// once it has ended and nothing of it is in flight on the connection, so the leader's table
// holds the sessions of this follower that are live, or were a moment ago.

// origin is one client session bound on a connection.
type origin struct {
	id       uint32
	inflight int // its requests registered on the connection and not answered
}

// errOriginsProbe stands for a leader whose answer to the origins probe is no answer to it.
var errOriginsProbe = errors.New("forward: the leader's answer to the origins probe is not a pong")

// askOrigins asks the leader at the other end of nc, before any request is written, whether
// it takes the clients' addresses: a ping with owner cluster.OriginsAsk, answered
// cluster.OriginsYes (yes) or with its own owner (no: a latch before origins, or a leader
// that does not audit). It ends when ctx does.
func askOrigins(ctx context.Context, nc net.Conn, revs uint8) (bool, error) {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(wire.AppendRequest(nil, &wire.Request{Op: wire.OpPing, Owner: cluster.OriginsAsk})); err != nil {
		return false, fmt.Errorf("forward: asking the leader about origins: %w", err)
	}
	dec := wire.NewResponseDecoder()
	dec.SetFlags(revs)
	var buf [wire.MaxFrame]byte
	for {
		n, err := nc.Read(buf[:])
		p := buf[:n]
		for len(p) > 0 {
			used, done, derr := dec.Decode(p)
			p = p[used:]
			switch {
			case derr != nil:
				return false, fmt.Errorf("%w: %v", errOriginsProbe, derr)
			case !done:
				continue
			case len(p) > 0: // nothing is sent unasked
				return false, fmt.Errorf("%w: more followed it", errOriginsProbe)
			}
			switch r := dec.Response(); {
			case r.Op == wire.OpPing && r.Owner == cluster.OriginsYes:
				return true, nil
			case r.Op == wire.OpPing && r.Owner == cluster.OriginsAsk:
				return false, nil
			default:
				return false, fmt.Errorf("%w: %v owner %d %s", errOriginsProbe, r.Op, r.Owner, r.Reason)
			}
		}
		if err != nil {
			return false, fmt.Errorf("forward: reading the leader's answer about origins: %w", err)
		}
	}
}

// sessionOf is the client session whose request e is, when its replier says so.
func sessionOf(e *entry) *cluster.Session {
	if o, ok := e.out.(cluster.Originated); ok {
		return o.Origin()
	}
	return nil
}

// register gives e its owner on c, which takes origins, binding e's session first (its bind
// frame appended to b) when it is not bound yet; seq is the link's owner counter. It returns
// b. The caller holds c.mu.
func (c *conn) register(b []byte, e *entry, seq *uint64) []byte {
	e.origin = nil
	var id uint32
	if s := sessionOf(e); s != nil {
		o := c.bound[s]
		if addr := s.From(); o == nil && addr != "" && len(addr) <= cluster.MaxOriginLen &&
			len(c.bound) < cluster.MaxOrigins && c.nextOrigin < 1<<32-1 {
			c.nextOrigin++
			o = &origin{id: c.nextOrigin}
			c.bound[s] = o
			b = wire.AppendRequest(b, &wire.Request{Op: wire.OpRelease, Token: uint64(o.id), Key: []byte(addr)})
		}
		if o != nil {
			o.inflight++
			e.origin, id = o, o.id
		}
	}
	for {
		*seq++
		if uint32(*seq) == 0 {
			continue
		}
		// Unique among the requests in flight on c, whatever the counter's low bits repeat.
		if owner := cluster.OriginOwner(id, uint32(*seq)); c.inflight[owner] == nil {
			e.link = owner
			return b
		}
	}
}

// answered counts e's answer for its origin. The caller holds c.mu.
func (e *entry) answered() {
	if e.origin != nil {
		e.origin.inflight--
		e.origin = nil
	}
}

// forgetEnded writes a forget frame for every session bound on c that has ended and has
// nothing in flight on it. It runs on the writer goroutine, as every write to c does.
func (l *Link) forgetEnded(c *conn) {
	var b []byte
	c.mu.Lock()
	if c.dead || !c.origins {
		c.mu.Unlock()
		return
	}
	for s, o := range c.bound {
		if o.inflight == 0 && s.Ended() {
			delete(c.bound, s)
			b = wire.AppendRequest(b, &wire.Request{Op: wire.OpRelease, Token: uint64(o.id)})
		}
	}
	c.mu.Unlock()
	if len(b) == 0 {
		return
	}
	c.nc.SetWriteDeadline(time.Now().Add(wire.WriteStallTimeout))
	if _, err := c.nc.Write(b); err != nil {
		l.fail(c, "write failed: "+err.Error(), nil)
	}
}
