package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/wire"
)

// gaugeValue is the value of the unlabelled gauge name in reg, failing t without one.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestExpiryLagGauge: latch_expiry_lag_seconds is how long the earliest lease has been over
// without its expiry, 0 before its deadline and again once the sweep has freed it.
func TestExpiryLagGauge(t *testing.T) {
	m := NewMetrics()
	h := newHarness(t, func(c *Config) { c.Metrics = m })
	c, r := h.conn()
	h.acquire(c, 1, "k", 0, 1)
	want(t, r.one(t), wire.OpAcquire, 1)
	h.acquire(c, 2, "later", 0, 60)
	r.take()
	for _, step := range []struct {
		advance time.Duration
		sweep   bool
		lag     float64
	}{
		{0, false, 0},
		{999 * time.Millisecond, false, 0},
		{3001 * time.Millisecond, false, 3},
		{0, true, 0}, // the sweep frees k; "later" is not over
	} {
		h.clock.Advance(step.advance)
		if step.sweep {
			h.n.Sweep()
		}
		if got := gaugeValue(t, m.Registry, "latch_expiry_lag_seconds"); got != step.lag {
			t.Fatalf("after %v (sweep %v): lag %v, want %v", step.advance, step.sweep, got, step.lag)
		}
	}
}

// TestReadyGauge: latch_ready follows the function /readyz serves, asked at each scrape.
func TestReadyGauge(t *testing.T) {
	m := NewMetrics()
	var err error
	m.RegisterReady(func() error { return err })
	if got := gaugeValue(t, m.Registry, "latch_ready"); got != 1 {
		t.Fatalf("ready: %v, want 1", got)
	}
	err = errors.New("no leader known")
	if got := gaugeValue(t, m.Registry, "latch_ready"); got != 0 {
		t.Fatalf("not ready: %v, want 0", got)
	}
}
