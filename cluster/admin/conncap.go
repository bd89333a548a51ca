package admin

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// connCap is a listener that holds at most max connections open. A connection over the cap
// takes the place of the one idle longest: a keep-alive between requests, or one that has
// not begun its first request (http.Server reports both through ConnState). When every
// connection has a request in progress, the newcomer is closed at once. So idle
// connections, however many a client opens, never keep a probe or an operator out, and the
// descriptors they cost are bounded.
//
// It counts TCP connections: wrap it in TLS, not the other way round. Accept runs in the
// server's accept loop; track is the server's ConnState hook, called from its connection
// goroutines; capConn.Close from anywhere.
type connCap struct {
	net.Listener
	max int
	log hclog.Logger

	mu   sync.Mutex
	open int
	idle list.List // of *capConn that are new or idle, longest idle first

	refused, evicted atomic.Uint64
	peak             atomic.Int64
	warnNext         atomic.Int64 // unix nanoseconds before which warnings are held back
}

// capConn is one connection of a connCap.
type capConn struct {
	net.Conn
	c    *connCap
	elem *list.Element // in c.idle while new or idle (c.mu)
	gone bool          // closed, or evicted: its place given back (c.mu)
}

func newConnCap(ln net.Listener, max int, log hclog.Logger) *connCap {
	return &connCap{Listener: ln, max: max, log: log}
}

// Accept returns the next connection, making room for it or closing it if the cap is reached.
func (c *connCap) Accept() (net.Conn, error) {
	for {
		nc, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		var victim *capConn
		if c.open >= c.max {
			if e := c.idle.Front(); e != nil {
				victim = e.Value.(*capConn)
				c.release(victim) // its place is the newcomer's now
			}
		}
		if c.open >= c.max {
			c.mu.Unlock()
			c.refused.Add(1)
			nc.Close()
			c.warn("HTTP connection limit reached and every connection has a request in progress; closing the new one", nc)
			continue
		}
		cc := &capConn{Conn: nc, c: c}
		c.open++
		cc.elem = c.idle.PushBack(cc)
		c.peak.Store(max(c.peak.Load(), int64(c.open)))
		c.mu.Unlock()
		if victim != nil {
			c.evicted.Add(1)
			victim.Conn.Close()
			c.warn("HTTP connection limit reached; closed the connection idle longest to make room", nc)
		}
		return cc, nil
	}
}

// track is the http.Server ConnState hook: new and idle connections may make room, active
// ones may not.
func (c *connCap) track(nc net.Conn, st http.ConnState) {
	cc, ok := netConnOf(nc).(*capConn)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc.elem != nil {
		c.idle.Remove(cc.elem)
		cc.elem = nil
	}
	if (st == http.StateNew || st == http.StateIdle) && !cc.gone {
		cc.elem = c.idle.PushBack(cc)
	}
}

// warn logs msg at most once a second.
func (c *connCap) warn(msg string, nc net.Conn) {
	now := time.Now().UnixNano()
	next := c.warnNext.Load()
	if now < next || !c.warnNext.CompareAndSwap(next, now+int64(time.Second)) {
		return
	}
	c.log.Warn(msg, "remote", nc.RemoteAddr().String(), "max_conns", c.max,
		"evicted_total", c.evicted.Load(), "refused_total", c.refused.Load())
}

// Close closes the connection and gives back its place. Closing twice is harmless.
func (cc *capConn) Close() error {
	cc.c.mu.Lock()
	cc.c.release(cc)
	cc.c.mu.Unlock()
	return cc.Conn.Close()
}

// release gives back cc's place, once (c.mu held).
func (c *connCap) release(cc *capConn) {
	if cc.gone {
		return
	}
	if cc.elem != nil {
		c.idle.Remove(cc.elem)
		cc.elem = nil
	}
	cc.gone = true
	c.open--
}
