package peer

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/cluster/internal/netpeek"
)

// table holds the connections between accept and the end of their handshake, grouped by
// source (sourceOf), oldest first within a source. It decides who may enter: a newcomer
// always gets a slot when some connection can give one up (see admit), so a flood of silent
// connections costs a bounded number of sockets and goroutines without locking anyone out.
//
// The accept loop calls admit; the handshake goroutines call remove. All methods are safe
// for concurrent use.
type table struct {
	max       int           // connections in the table at most (Config.MaxHandshakes)
	perSource int           // connections of one source at most (Config.MaxHandshakesPerSource)
	stale     time.Duration // a connection in the handshake longer than this may be evicted

	mu    sync.Mutex
	n     int
	bySrc map[string]*list.List // of *pending, oldest first; no empty lists
}

// pending is one connection in the handshake.
type pending struct {
	conn net.Conn
	src  string
	at   time.Time // accepted

	// spoke is set by the handshake goroutine when the dialer's first byte arrives: a
	// connection that has spoken is evicted only once it is stale.
	spoke atomic.Bool

	elem    *list.Element // in bySrc[src]; nil once removed (mu)
	evicted bool          // removed by admit to make room; its owner closes conn (mu)
}

func newTable(max, perSource int, stale time.Duration) *table {
	return &table{max: max, perSource: min(perSource, max), stale: stale, bySrc: make(map[string]*list.List)}
}

// admit enters c, accepted at now from src. When src already holds perSource connections,
// the oldest of them that is silent (no byte from the dialer yet) or stale gives up its slot;
// when the table is full, the oldest such connection of the source holding the most does.
// That connection is returned as victim, already removed and marked evicted: the caller
// closes it. When no connection can give up its slot, admit returns p == nil and the caller
// closes c.
//
// Silent or stale first, oldest first: a member sends its channel byte (or its TLS
// ClientHello) within milliseconds of the hello, so the connections that have said nothing
// for longest are the ones least likely to be a member; the newest connection, which is the
// one a member has just opened, is never the one evicted while an older silent one exists.
func (t *table) admit(c net.Conn, src string, now time.Time) (p, victim *pending) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.bySrc[src]
	switch {
	case l != nil && l.Len() >= t.perSource:
		victim = t.oldestEvictable(l, now)
	case t.n >= t.max:
		victim = t.oldestEvictable(t.largest(), now)
	}
	if victim != nil {
		t.removeLocked(victim)
		victim.evicted = true
	} else if (l != nil && l.Len() >= t.perSource) || t.n >= t.max {
		return nil, nil
	}
	p = &pending{conn: c, src: src, at: now}
	if l = t.bySrc[src]; l == nil { // looked up again: the eviction may have emptied it
		l = list.New()
		t.bySrc[src] = l
	}
	p.elem = l.PushBack(p)
	t.n++
	return p, victim
}

// oldestEvictable returns the oldest connection of l that is silent or stale, or nil.
func (t *table) oldestEvictable(l *list.List, now time.Time) *pending {
	if l == nil {
		return nil
	}
	for e := l.Front(); e != nil; e = e.Next() {
		p := e.Value.(*pending)
		if p.spoke.Load() && now.Sub(p.at) <= t.stale {
			continue
		}
		if !p.spoke.Load() && netpeek.HasInput(p.conn) {
			// Its first bytes are in the socket buffer, not yet read by its goroutine: a
			// member that answered the hello at once. It has spoken.
			p.spoke.Store(true)
			continue
		}
		return p
	}
	return nil
}

// largest returns the list of the source holding the most connections. It is called only
// when the table is full, so there is one.
func (t *table) largest() *list.List {
	var best *list.List
	for _, l := range t.bySrc {
		if best == nil || l.Len() > best.Len() {
			best = l
		}
	}
	return best
}

// remove takes p out of the table when its handshake has ended. It reports false if admit
// evicted p first: then p's connection is being closed and must not be used.
func (t *table) remove(p *pending) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.evicted {
		return false
	}
	t.removeLocked(p)
	return true
}

func (t *table) removeLocked(p *pending) {
	if p.elem == nil {
		return
	}
	l := t.bySrc[p.src]
	l.Remove(p.elem)
	p.elem = nil
	t.n--
	if l.Len() == 0 {
		delete(t.bySrc, p.src)
	}
}

// size is the number of connections in the table.
func (t *table) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// sourceOf groups connections for the per-source cap: an IPv4 address, or the /64 prefix of
// an IPv6 address (one host usually holds a whole /64, so counting single IPv6 addresses
// would cap nothing).
func sourceOf(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return tcp.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// firstByte is an accepted connection during the handshake. Until the dialer's first byte
// arrives its reads end at the first-byte deadline the caller set; that byte marks the
// connection as having spoken and moves the read deadline to the handshake's.
type firstByte struct {
	net.Conn
	p        *pending
	deadline time.Time // the end of the handshake
	heard    bool      // the first byte has been read
}

func (c *firstByte) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.heard {
		c.heard = true
		c.p.spoke.Store(true)
		_ = c.Conn.SetReadDeadline(c.deadline)
	}
	return n, err
}
