package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/latchd/latch/wire"
)

// Metrics holds every Prometheus collector of a node in its own registry (never the global
// one). Counters on the hot path are resolved once, so recording is one atomic add.
type Metrics struct {
	// Registry is what /metrics serves.
	Registry *prometheus.Registry

	acqAcquired, acqTimeout, acqBusy, acqUnavailable, acqExhausted prometheus.Counter
	relReleased, relNotHeld                                        prometheus.Counter
	busyPending, busyKeys, busyWaiters                             prometheus.Counter
	expired, waitCancelled                                         prometheus.Counter
	frameErrors                                                    *prometheus.CounterVec
	frameErr                                                       map[wire.Reason]prometheus.Counter
	grantLatency                                                   prometheus.Histogram

	// Connections is the number of open client connections.
	Connections prometheus.Gauge
	// ConnsRefused counts connections closed at accept because of the connection limit.
	ConnsRefused prometheus.Counter
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
	busy := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_admission_refusals_total",
		Help: "Acquires answered B, by the admission gate that refused them (pending, keys, waiters).",
	}, []string{"gate"})
	fe := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latch_frame_errors_total",
		Help: "E responses sent for a request, by reason.",
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
		frameErrors: fe,
		frameErr:    make(map[wire.Reason]prometheus.Counter, len(wire.Reasons)),
		grantLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "latch_grant_latency_seconds",
			Help:    "Time from reading an acquire frame to granting it, waiting included.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12), // 10us .. ~42s
		}),
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "latch_connections",
			Help: "Open client connections.",
		}),
		ConnsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latch_connections_refused_total",
			Help: "Connections closed at accept because the connection limit was reached.",
		}),
	}
	for _, r := range wire.Reasons {
		m.frameErr[r] = fe.WithLabelValues(string(r))
	}
	reg.MustRegister(acq, rel, busy, fe, m.expired, m.waitCancelled, m.grantLatency, m.Connections, m.ConnsRefused)
	return m
}

// FrameError counts one E response with reason r.
func (m *Metrics) FrameError(r wire.Reason) {
	if c, ok := m.frameErr[r]; ok {
		c.Inc()
	}
}
