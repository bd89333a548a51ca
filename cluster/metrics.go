package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/wire"
)

// Metrics holds every Prometheus collector of a node in its own registry (never the global
// one). Counters on the hot path are resolved once, so recording is one atomic add.
type Metrics struct {
	// Registry is what /metrics serves.
	Registry *prometheus.Registry

	acqAcquired, acqTimeout, acqBusy, acqUnavailable, acqExhausted prometheus.Counter
	relReleased, relNotHeld                                        prometheus.Counter
	extExtended, extNotHeld, extUnsupported                        prometheus.Counter
	busyPending, busyKeys, busyWaiters                             prometheus.Counter
	expired, waitCancelled                                         prometheus.Counter
	errs                                                           map[wire.Reason]prometheus.Counter
	grantLatency, releaseLatency                                   prometheus.Histogram

	// Connections is the number of open client connections.
	Connections prometheus.Gauge
	// ConnsRefused counts client connections answered E unavailable and closed at accept:
	// over the connection limit, evicted from the handshake to make room, or accepted on the
	// spare descriptor when the process had run out of them.
	ConnsRefused prometheus.Counter
}

// refusals are the E reasons that refuse a well-formed request (the server's state, not the
// client's frame, decided them): they count in latch_requests_refused_total, every other
// reason in latch_frame_errors_total.
var refusals = map[wire.Reason]bool{
	wire.ReasonUnavailable:    true,
	wire.ReasonIndeterminate:  true,
	wire.ReasonTokenExhausted: true,
	wire.ReasonInternal:       true,
	wire.ReasonUnsupported:    true,
}

// NewMetrics creates the collectors in a fresh registry, with Go runtime and process
// collectors alongside.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	acq := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_acquires_total",
		Help: "Acquire requests answered, by result (acquired, timeout, busy, unavailable, token_exhausted).",
	}, []string{"result"})
	rel := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_releases_total",
		Help: "Release requests answered, by result (released, not_held).",
	}, []string{"result"})
	ext := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_extends_total",
		Help: "Extend requests (revision 2) answered, by result (extended, not_held, unsupported).",
	}, []string{"result"})
	busy := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_admission_refusals_total",
		Help: "Acquires answered B, by the admission gate that refused them (pending, keys, waiters).",
	}, []string{"gate"})
	fe := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_frame_errors_total",
		Help: "E responses to a frame the client got wrong (malformed, bad key, owner or range, handshake), by reason.",
	}, []string{"reason"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_requests_refused_total",
		Help: "E responses refusing a well-formed request (unavailable, indeterminate, token_exhausted, internal, unsupported), by reason.",
	}, []string{"reason"})
	m := &Metrics{
		Registry:       reg,
		acqAcquired:    acq.WithLabelValues("acquired"),
		acqTimeout:     acq.WithLabelValues("timeout"),
		acqBusy:        acq.WithLabelValues("busy"),
		acqUnavailable: acq.WithLabelValues("unavailable"),
		acqExhausted:   acq.WithLabelValues("token_exhausted"),
		relReleased:    rel.WithLabelValues("released"),
		relNotHeld:     rel.WithLabelValues("not_held"),
		extExtended:    ext.WithLabelValues("extended"),
		extNotHeld:     ext.WithLabelValues("not_held"),
		extUnsupported: ext.WithLabelValues("unsupported"),
		busyPending:    busy.WithLabelValues("pending"),
		busyKeys:       busy.WithLabelValues("keys"),
		busyWaiters:    busy.WithLabelValues("waiters"),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latch_leases_expired_total",
			Help: "Locks freed because their lease ran out (sweep or lazily on access).",
		}),
		waitCancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latch_waiters_cancelled_total",
			Help: "Waiters dropped because their connection closed before they were granted.",
		}),
		errs: make(map[wire.Reason]prometheus.Counter, len(wire.Reasons)),
		grantLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "latch_grant_latency_seconds",
			Help:    "Time from reading an acquire frame to granting it, waiting included.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12), // 10us .. ~42s
		}),
		releaseLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "latch_release_latency_seconds",
			Help:    "Time from the node taking a release to its answer (R or N), the Raft commit included in cluster mode.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10), // 10us .. ~2.6s
		}),
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "latch_connections",
			Help: "Open client connections.",
		}),
		ConnsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latch_connections_refused_total",
			Help: "Client connections answered E unavailable and closed at accept: connection limit reached, or no file descriptor left.",
		}),
	}
	// unsupported is revision 2's reason (an extend this cluster cannot apply): a refusal.
	m.errs[wire.ReasonUnsupported] = refused.WithLabelValues(string(wire.ReasonUnsupported))
	for _, r := range wire.Reasons {
		if refusals[r] {
			m.errs[r] = refused.WithLabelValues(string(r))
		} else {
			m.errs[r] = fe.WithLabelValues(string(r))
		}
	}
	reg.MustRegister(acq, rel, ext, busy, fe, refused, m.expired, m.waitCancelled, m.grantLatency, m.releaseLatency,
		m.Connections, m.ConnsRefused)
	return m
}

// FrameError counts one E response with reason r: a refusal of a well-formed request in
// latch_requests_refused_total, anything else in latch_frame_errors_total.
func (m *Metrics) FrameError(r wire.Reason) {
	if c, ok := m.errs[r]; ok {
		c.Inc()
	}
}

// released records the latency of one answered release.
func (m *Metrics) released(d time.Duration) { m.releaseLatency.Observe(d.Seconds()) }

// SetBuildInfo registers latch_build_info{version,revision,date,goversion} 1: the build b
// names (buildinfo.Get: the values `latch version` and /v1/status show).
func (m *Metrics) SetBuildInfo(b buildinfo.Info) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "latch_build_info",
		Help:        "Always 1; its labels name the running build.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "date": b.Date, "goversion": b.Go},
	})
	g.Set(1)
	m.Registry.MustRegister(g)
}

// RegisterReady registers latch_ready: 1 while ready returns nil (what the node's /readyz
// answers), else 0, asked at every scrape. Call it once, with the function /readyz serves.
func (m *Metrics) RegisterReady(ready func() error) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "latch_ready",
		Help: "1 while the node is ready to serve (its /readyz answers 200), else 0.",
	}, func() float64 {
		if ready() != nil {
			return 0
		}
		return 1
	}))
}

// RegisterCommitLatency registers and returns the histogram of Raft commit latency, once
// (cluster mode: raftnode.Config.CommitLatency observes into it).
func (m *Metrics) RegisterCommitLatency() prometheus.Observer {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "latch_raft_commit_latency_seconds",
		Help:    "Time from proposing a Raft log entry (a batch of commands) to its commit and result on this leader.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12), // 100us .. ~2.4s
	})
	m.Registry.MustRegister(h)
	return h
}
