package forward

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/wire"
)

// maxBatch is the most frames the writer coalesces into one write (at most 146 bytes each, 148
// on a link of revision 2).
const maxBatch = 4 * wire.ReplyBatch

// watchInterval is how often the writer looks for requests whose answer is overdue.
const watchInterval = time.Second

// entry is one forwarded request, from Forward until its one answer is delivered.
type entry struct {
	op     wire.Op
	owner  uint64 // the client's owner: the answer carries it
	wait   uint8  // as the client asked; stamped again when written
	lease  uint16
	token  uint64
	key    []byte // a copy: the session's decoder reuses its buffer
	out    cluster.Replier
	readAt time.Time // when the follower's session read the frame (Config.Now's clock)
	unsent time.Time // past it, an unsent request is answered E unavailable

	// Set by the writer when the entry is registered on a connection.
	link     uint64    // the link-local owner it is written with
	origin   *origin   // its client session's binding on that connection (origins.go), or nil
	start    int       // offset of its frame in the write
	answerBy time.Time // real time: no answer by then and the connection is taken for lost
}

// Stats is a snapshot of a link's state, for tests and metrics.
type Stats struct {
	Queued   int    // accepted, not yet written
	InFlight int    // written (or being written), not yet answered, over all connections
	Conns    int    // open connections: the current leader's and old ones still draining
	Leader   string // the address new requests go to ("" when no leader is known)
	// Revs is what the connection new requests go to carries: wire.FlagLeases on a forward
	// channel of revision 2, 0 on a latch/1 one or while there is none.
	Revs uint8
}

// Link forwards a follower's acquires and releases to the leader over one pipelined
// connection to the leader's forward channel, and relays each answer to the session that
// asked, with the client's owner. It is safe for concurrent use.
//
// Goroutines: Forward and SetLeader are called by anyone (Forward by the follower's session
// readers); one writer goroutine dials, stamps and writes; one reader goroutine per open
// connection matches answers. Replies are delivered from the caller of Forward (requests
// refused at once), the writer (unsent requests) or a reader (answers, lost connections),
// never with a lock of the link held.
type Link struct {
	cfg Config
	log hclog.Logger

	mu         sync.Mutex
	leader     string
	cur        *conn              // where new requests are written; nil until dialled
	conns      map[*conn]struct{} // every open connection: cur and old ones draining
	queue      []*entry           // accepted and not yet written, oldest first
	downUntil  time.Time          // after a failed dial: refuse at once until then (Config.Now)
	cancelDial context.CancelFunc
	closed     bool

	nextOwner uint64 // link-local owners; only the writer touches it
	wbuf      []byte // the writer's encoding buffer
	wake      chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup

	beforeWrite atomic.Pointer[func(*conn)] // tests: runs between a batch's registration and its Write
}

// NewLink returns a link with no leader; call SetLeader. Close stops it.
func NewLink(cfg Config) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	l := &Link{
		cfg:   cfg,
		log:   cfg.Logger,
		conns: make(map[*conn]struct{}),
		wbuf:  make([]byte, 0, maxBatch*wire.MaxFrame),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	l.wg.Add(1)
	go l.writeLoop()
	return l, nil
}

// Forward sends an acquire, a release or an extend to the leader and delivers exactly one
// answer to out, with req.Owner: the leader's answer, or E unavailable when the request was
// definitely not written (no leader known, dial failed, queue full, link closed, wait used up
// before it could be written), or E indeterminate when it may have been written and the
// connection failed before the answer. An extend that would go out on a latch/1 connection
// is answered E unsupported instead and never written (the leader would not know the op).
// A grant reaches out as the node's own do, Response{Op: OpAcquire, Token, Age}: the
// leader's age on a connection of revision 2, 0 on a latch/1 one; the follower adds none.
// readAt is when the follower read the frame: an acquire's wait is re-stamped from it when
// the frame is written. req is not kept. Forward never blocks on the network; it implements
// the forwarding half of server.Router.
func (l *Link) Forward(req *wire.Request, readAt time.Time, out cluster.Replier) {
	if req.Op != wire.OpAcquire && req.Op != wire.OpRelease && req.Op != wire.OpExtend {
		l.log.Error("only acquires, releases and extends are forwarded", "op", req.Op.String())
		out.Reply(errorFor(req.Owner, wire.ReasonInternal))
		return
	}
	if reason := req.Check(); reason != "" {
		// The session checks first; a frame that would break the link's framing never goes out.
		out.Reply(errorFor(req.Owner, reason))
		return
	}
	e := &entry{
		op: req.Op, owner: req.Owner, wait: req.Wait, lease: req.Lease, token: req.Token,
		key: append([]byte(nil), req.Key...), out: out, readAt: readAt,
		unsent: unsentDeadline(req.Wait, readAt, l.cfg.UnsentTimeout),
	}
	l.mu.Lock()
	if l.closed || l.leader == "" || len(l.queue) >= l.cfg.MaxQueued || l.refusing() {
		l.mu.Unlock()
		out.Reply(errorFor(e.owner, wire.ReasonUnavailable))
		return
	}
	l.queue = append(l.queue, e)
	first := len(l.queue) == 1
	l.mu.Unlock()
	if first {
		l.signal()
	}
}

// SetLeader names the node new requests go to; "" means no leader is known (every request
// is answered E unavailable). Requests already written to the old leader stay on its
// connection, which is closed once they are all answered (or it fails: they are then
// E indeterminate). Requests not yet written go to the new leader.
func (l *Link) SetLeader(addr string) {
	l.mu.Lock()
	if l.closed || addr == l.leader {
		l.mu.Unlock()
		return
	}
	l.log.Info("leader changed", "from", l.leader, "to", addr)
	l.leader = addr
	l.downUntil = time.Time{}
	if l.cancelDial != nil {
		l.cancelDial() // a dial to the old leader: the writer sees the change and dials again
	}
	old := l.cur
	l.cur = nil
	l.mu.Unlock()
	if old != nil {
		l.drain(old)
	}
	l.signal()
}

// Close stops the link: requests not yet written are answered E unavailable, requests in
// flight E indeterminate, and every connection is closed. It returns when the link's
// goroutines have ended.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.wg.Wait()
		return nil
	}
	l.closed = true
	if l.cancelDial != nil {
		l.cancelDial()
	}
	queued := l.takeQueue(len(l.queue))
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	answer(queued, wire.ReasonUnavailable)
	for _, c := range conns {
		l.fail(c, "link closed", nil)
	}
	close(l.done)
	l.wg.Wait()
	return nil
}

// Stats returns the link's current counts.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	st := Stats{Queued: len(l.queue), Conns: len(l.conns), Leader: l.leader}
	if l.cur != nil {
		st.Revs = l.cur.revs
	}
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		st.InFlight += len(c.inflight)
		c.mu.Unlock()
	}
	return st
}

func (l *Link) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// takeQueue removes and returns the first n queued entries. The caller holds l.mu.
func (l *Link) takeQueue(n int) []*entry {
	if n == len(l.queue) {
		q := l.queue
		l.queue = nil
		return q
	}
	q := append([]*entry(nil), l.queue[:n]...)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	return q
}

// requeue puts entries that were taken for c but never written back at the head of the
// queue, in their order, and stops using c (it is failing or draining) so that the next round
// dials. After Close they are answered E unavailable instead.
func (l *Link) requeue(c *conn, es []*entry) {
	l.mu.Lock()
	if l.cur == c {
		l.cur = nil
	}
	if l.closed {
		l.mu.Unlock()
		answer(es, wire.ReasonUnavailable)
		return
	}
	l.queue = append(es, l.queue...) // es is the writer's own slice: it may be kept
	l.mu.Unlock()
}

// forget drops c from the link once it is closed.
func (l *Link) forget(c *conn) {
	l.mu.Lock()
	if l.cur == c {
		l.cur = nil
	}
	delete(l.conns, c)
	l.mu.Unlock()
}

func errorFor(owner uint64, reason wire.Reason) wire.Response {
	return wire.Response{Op: wire.OpError, Owner: owner, Reason: reason}
}

// answer delivers E reason to each entry, with the client's owner.
func answer(es []*entry, reason wire.Reason) {
	for _, e := range es {
		e.out.Reply(errorFor(e.owner, reason))
	}
}
