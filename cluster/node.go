package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// Replier delivers responses to one client connection. The node calls Reply with its mutex
// held, from whichever goroutine made the decision (a session's reader, a waiter's timer, the
// sweep, raft's FSM goroutine through the proposer's pipeline), so Reply must queue and return at once; a closed
// connection drops the response.
type Replier interface {
	Reply(r wire.Response)
}

// Session is the node's handle on one client session (a client connection, or a connection
// a follower forwards on): where its answers go and which of its acquires are still waiting.
// It is not a connection and does no I/O. Get one with Attach, give it back with Detach.
type Session struct {
	from    string // where its requests come from (the audit trail)
	out     Replier
	waiting map[*waiter]struct{}
	ended   atomic.Bool // Detach was called: nothing more is sent to it (read without n.mu by Ended)
	// A forward connection's: the follower as the audit trail names it, and the client
	// addresses it bound (origins.go; under n.mu; nil until the first).
	via     string
	origins map[uint32]string
}

// Node decides acquires and releases for one lock table. All of its methods are safe for
// concurrent use; decisions are serialised by one mutex, which is never held across I/O.
//
// In single mode the node owns the table and applies each transition in place (local). In
// cluster mode (Replicated) transitions are proposed and their results come back in log
// order; the node only decides while it leads. See docs/architecture.md.
type Node struct {
	mu sync.Mutex
	ap applier // how transitions reach the table (applier.go)
	// leading: the node decides (single mode: from the start). Changed under mu (Lead,
	// Follow); atomic so that Leading needs no mutex (sessions ask per frame).
	leading  atomic.Bool
	epoch    uint64    // bumped at every leadership change; stale results leave the view alone
	last     fsm.Token // last token issued, as far as the node has seen
	view     view      // what the deciding node knows of its keys (view.go)
	lane     lane      // cluster mode: the leader's expiry timer and lane (expire.go)
	pending  int       // acquires received and not answered (waiters included)
	waiters  int       // live waiters over all keys
	gates    [3]Gate
	draining bool

	clock     Clock
	clockZero time.Time // the clock at New: mono counts from it (not an epoch, which counts leaderships)
	log       hclog.Logger
	audit     auditor
	m         *Metrics

	stop     chan struct{}
	stopOnce sync.Once
	swept    chan struct{}
}

const (
	gatePending = iota
	gateKeys
	gateWaiters
)

// NewNode returns a node. Without cfg.Replicated it is a single-mode node that owns an
// in-memory table; with it, a cluster-mode node that waits for Lead. Call Run to start the
// expiry sweep (single mode; a backstop in cluster mode, where the leader's expiry timer
// ends leases on time) and Close to stop it.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	n := &Node{
		gates:     [3]Gate{{Limit: cfg.MaxPending}, {Limit: cfg.MaxKeys}, {Limit: cfg.MaxWaiters}},
		clock:     cfg.Clock,
		clockZero: cfg.Clock.Now(),
		log:       cfg.Logger,
		audit:     auditor{log: cfg.Audit},
		m:         cfg.Metrics,
		stop:      make(chan struct{}),
		swept:     make(chan struct{}),
		lane:      newLane(cfg.Replicated),
	}
	if cfg.Replicated != nil {
		n.ap = &replicatedApplier{n: n, rep: cfg.Replicated}
	} else {
		table, err := fsm.NewTable(fsm.Token(cfg.TokenFloor))
		if err != nil {
			return nil, err
		}
		n.ap, n.last = &localApplier{n: n, table: table}, table.LastToken()
		n.leading.Store(true)
	}
	n.view.reset()
	n.registerGauges()
	return n, nil
}

// mono converts t to nanoseconds since the node's epoch (monotonic when t carries a
// monotonic reading, as time.Now does).
func (n *Node) mono(t time.Time) int64 { return int64(t.Sub(n.clockZero)) }

// Now reads the node's clock; sessions stamp the time a frame was read with it.
func (n *Node) Now() time.Time { return n.clock.Now() }

// Attach registers a client connection whose answers go to out, from origin (its remote
// address, as the audit trail names it; "" when it has none).
func (n *Node) Attach(out Replier, origin string) *Session {
	return &Session{out: out, from: origin}
}

// Detach forgets a closed connection: its waiters are dropped (they were never granted, so
// nothing is lost), and later decisions send it nothing. Closing a connection releases no lock.
// A waiter whose acquire is already proposed keeps it; if it is granted, the node releases it.
func (n *Node) Detach(c *Session) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c.ended.Store(true)
	for w := range c.waiting {
		if w.proposed {
			continue
		}
		n.retire(w, true)
		n.m.waitCancelled.Inc()
	}
	c.waiting = nil
}

// Leading reports whether the node decides requests now (single mode: always).
func (n *Node) Leading() bool { return n.leading.Load() }

func (n *Node) busy(c *Session, owner uint64, gate prometheus.Counter) {
	gate.Inc()
	n.m.acqBusy.Inc()
	c.out.Reply(wire.Response{Op: wire.OpBusy, Owner: owner})
}

func (n *Node) fail(c *Session, owner uint64, reason wire.Reason) {
	n.m.FrameError(reason)
	switch reason {
	case wire.ReasonUnavailable:
		n.m.acqUnavailable.Inc()
	case wire.ReasonTokenExhausted:
		n.m.acqExhausted.Inc()
	}
	if !c.ended.Load() {
		c.out.Reply(wire.Response{Op: wire.OpError, Owner: owner, Reason: reason})
	}
}

// Drain stops granting: every waiter is answered E unavailable (it was never granted, so a
// client may retry elsewhere) and later acquires get the same. Releases keep working.
func (n *Node) Drain() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.draining = true
	n.failWaiters(wire.ReasonUnavailable)
}

// failWaiters answers every live waiter that is not proposed E reason: no waiter can be
// granted here any more (the node drains, stops leading, or the counter is exhausted).
func (n *Node) failWaiters(reason wire.Reason) {
	for _, ks := range n.view.keys {
		if ks.q == nil {
			continue
		}
		for _, w := range ks.q.ws[ks.q.head:] {
			if w.done || w.proposed {
				continue
			}
			n.retire(w, true)
			n.fail(w.c, w.owner, reason)
		}
	}
}

// Stats is a consistent snapshot of the node's gauges.
// Its JSON names (the "node" object of /v1/status) are snake_case like the rest of the
// status document.
type Stats struct {
	Keys        int    `json:"keys"`
	Waiters     int    `json:"waiters"`
	Pending     int    `json:"pending"`
	LastToken   uint64 `json:"last_token"`
	PendingGate bool   `json:"pending_gate_closed"`
	KeysGate    bool   `json:"keys_gate_closed"`
	WaitersGate bool   `json:"waiters_gate_closed"`
	Draining    bool   `json:"draining"`
	Leading     bool   `json:"leading"`
}

// observeGates re-evaluates every gate against its gauge. The caller holds n.mu.
func (n *Node) observeGates() {
	n.gates[gatePending].Admit(n.pending)
	n.gates[gateKeys].Admit(n.view.len())
	n.gates[gateWaiters].Admit(n.waiters)
}

// Stats returns the node's gauges, re-evaluating the gates against them.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.observeGates()
	keys, last := n.view.len(), n.last
	if !n.leading.Load() {
		// A follower has no view: report the replicated table it applies.
		n.ap.read(func(t *fsm.Table) { keys, last = t.Len(), t.LastToken() })
	}
	return Stats{
		Keys:        keys,
		Waiters:     n.waiters,
		Pending:     n.pending,
		LastToken:   uint64(last),
		PendingGate: n.gates[gatePending].Closed(),
		KeysGate:    n.gates[gateKeys].Closed(),
		WaitersGate: n.gates[gateWaiters].Closed(),
		Draining:    n.draining,
		Leading:     n.leading.Load(),
	}
}

func (n *Node) registerGauges() {
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(n.Stats()) })
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	n.m.Registry.MustRegister(
		gauge("latch_keys", "Keys held in the lock table (as seen by the node that decides).", func(s Stats) float64 { return float64(s.Keys) }),
		gauge("latch_waiters", "Acquires queued behind a holder.", func(s Stats) float64 { return float64(s.Waiters) }),
		gauge("latch_pending_acquires", "Acquires received and not yet answered, waiters included.", func(s Stats) float64 { return float64(s.Pending) }),
		gauge("latch_last_token", "The last fencing token issued (the token floor before any grant).", func(s Stats) float64 { return float64(s.LastToken) }),
		gateGauge{n},
		gauge("latch_leading", "1 while this node decides requests (single mode: always).", func(s Stats) float64 { return b(s.Leading) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "latch_expiry_lag_seconds",
			Help: "How long the earliest lease this node decides has been over without its expiry being applied or proposed (0 when none is; always 0 on a follower)."},
			func() float64 { return n.ExpiryLag().Seconds() }),
	)
}

// ExpiryLag is how long ago the earliest lease in the view ended without its expiry applied
// (single mode) or proposed (cluster-mode leader): 0 when no lease is over, and on a node that
// does not decide. A parked holder (its release or expiry in the log) does not count. The
// single-mode sweep runs every expiry.SweepInterval, so up to that much is normal there; a
// cluster leader's expiry timer keeps it near 0 unless its expiry lane is full.
func (n *Node) ExpiryLag() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		return 0
	}
	next, ok := n.view.held.Next()
	if !ok {
		return 0
	}
	return time.Duration(max(0, n.mono(n.clock.Now())-next))
}

// gateGauge is latch_admission_gate_closed{gate}: 1 while the gate refuses acquires, from one
// Stats snapshot per scrape.
type gateGauge struct{ n *Node }

var gateDesc = prometheus.NewDesc("latch_admission_gate_closed",
	"1 while the admission gate refuses acquires with B: pending (any acquire), keys (acquires of new keys), waiters (acquires that would wait).",
	[]string{"gate"}, nil)

func (g gateGauge) Describe(ch chan<- *prometheus.Desc) { ch <- gateDesc }

func (g gateGauge) Collect(ch chan<- prometheus.Metric) {
	s := g.n.Stats()
	for _, v := range []struct {
		gate   string
		closed bool
	}{{"pending", s.PendingGate}, {"keys", s.KeysGate}, {"waiters", s.WaitersGate}} {
		x := 0.0
		if v.closed {
			x = 1
		}
		ch <- prometheus.MustNewConstMetric(gateDesc, prometheus.GaugeValue, x, v.gate)
	}
}
