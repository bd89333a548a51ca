package server

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/cluster/internal/netpeek"
)

// staleHandshake: a connection still in the handshake this long after accept may make room
// for a newcomer even though it has spoken. A client needs one or two round trips; the
// protocol's bound (wire.HandshakeTimeout) is for slow networks, not for holding a slot
// while others wait.
const staleHandshake = time.Second

// handshakes is the list of client sessions that have not finished the handshake, oldest
// first: the budget strangers share. The accept loop adds and evicts; a session leaves when
// its handshake ends. Safe for concurrent use.
type handshakes struct {
	mu sync.Mutex
	l  list.List // of *session
}

// hsEntry is a session's place in the handshake list.
type hsEntry struct {
	at    time.Time     // accepted
	spoke atomic.Bool   // the client's first byte has been read (set by the session's reader)
	elem  *list.Element // nil once out of the list (handshakes.mu)
	// evicted is set by the accept loop when it closes the session to make room; the reader
	// then ends the session with E unavailable.
	evicted atomic.Bool
}

func (h *handshakes) add(ss *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ss.hs.elem = h.l.PushBack(ss)
}

// done takes ss out of the list (its handshake finished or it ended); it may be out already.
// It reports false if ss was evicted: then its handshake must not finish.
func (h *handshakes) done(ss *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ss.hs.evicted.Load() {
		return false
	}
	if ss.hs.elem != nil {
		h.l.Remove(ss.hs.elem)
		ss.hs.elem = nil
	}
	return true
}

func (h *handshakes) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l.Len()
}

// evict takes out the oldest session that has sent nothing (or is stale) and returns it,
// marked evicted; the caller stops its reader. It returns nil when every session in the
// handshake has spoken within staleHandshake: then nothing may make room.
//
// Oldest silent first: a client sends its hello the moment it has connected, so the
// sessions that have said nothing for longest are the least likely to be one, and a
// client's fresh connection is never taken while an older silent one exists. A session
// whose first bytes wait unread in its socket buffer has spoken.
func (h *handshakes) evict(now time.Time) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	for e := h.l.Front(); e != nil; e = e.Next() {
		ss := e.Value.(*session)
		if ss.hs.spoke.Load() {
			if now.Sub(ss.hs.at) <= staleHandshake {
				continue
			}
		} else if netpeek.HasInput(ss.nc) {
			ss.hs.spoke.Store(true)
			continue
		}
		h.l.Remove(e)
		ss.hs.elem = nil
		ss.hs.evicted.Store(true)
		return ss
	}
	return nil
}
