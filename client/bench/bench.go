// Package bench is the load generator behind `latch bench`: workers, each with its own
// client, loop acquire+release on a set of keys, and a run reports throughput, latency
// percentiles, errors by kind and fencing inversions (a grant whose token is not above the
// previous holder's of the same key). Holders (extenders), if asked for, keep one lock each
// alive by extending it at a steady rate alongside the pairs, and the run reports their
// extends per second, extend latency and every extend that failed. The CLI turns flags into
// a Setup, whose Open checks it and makes the clients of a Config, and prints a Result
// (WriteText).
package bench

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/client"
)

// MaxSamples bounds the latency samples one worker keeps (8 bytes each).
const MaxSamples = 2_000_000

// Config is one run. Worker i uses Clients[i] and key Prefix + (i mod Keys).
type Config struct {
	Clients  []*client.Client
	Keys     int
	Prefix   string
	Options  client.AcquireOptions
	Warmup   time.Duration // load before the window, not counted
	Duration time.Duration // the measurement window
	// Progress, if set, is called about once a second of the window with the time since it
	// began and the pairs counted so far.
	Progress func(elapsed time.Duration, pairs int64)
	// Measure, if set, is called when the window opens; the func it returns when it closes
	// (a CPU profile of the window, say).
	Measure func() (done func())
	// Holders, if Holders.Count is above 0, take their keys before the warm-up and extend
	// them from then until the window closes.
	Holders Holders
}

// Result is what a run measured.
type Result struct {
	Clients    int                `json:"clients"`
	Keys       int                `json:"keys"`
	DurationS  float64            `json:"duration_s"`
	Pairs      int64              `json:"pairs"`
	PairsPerS  float64            `json:"pairs_per_s"`
	AcquireMs  map[string]float64 `json:"acquire_ms"`
	ReleaseMs  map[string]float64 `json:"release_ms"`
	Errors     map[string]int64   `json:"errors"`
	Inversions int64              `json:"fencing_inversions"`
	Client     map[string]uint64  `json:"client"`

	// The holders (omitted without any): how many there were and got their key, how long
	// taking the keys took (before the warm-up), the extends that succeeded in the window, per
	// second and their latency; over the whole run, the extends that failed, the periods a
	// holder skipped because its extend took longer than the period, and every holder error
	// by kind ("acquire: ...", "extend: ...", "release: ...").
	Holders       int                `json:"holders,omitempty"`
	HoldersHeld   int                `json:"holders_held,omitempty"`
	ExtendEveryS  float64            `json:"extend_every_s,omitempty"`
	HoldSetupS    float64            `json:"hold_setup_s,omitempty"`
	Extends       int64              `json:"extends,omitempty"`
	ExtendsPerS   float64            `json:"extends_per_s,omitempty"`
	ExtendMs      map[string]float64 `json:"extend_ms,omitempty"`
	ExtendsFailed int64              `json:"extends_failed,omitempty"`
	ExtendsMissed int64              `json:"extends_missed,omitempty"`
	HoldErrors    map[string]int64   `json:"hold_errors,omitempty"`
}

// worker is one worker's tally; only its own goroutine writes it until the run ends.
type worker struct {
	acq, rel []time.Duration
	pairs    int64
	errs     map[string]int64
}

// Run runs cfg until its window has passed or ctx ends. Holders first take their keys; then
// the pair workers and the holders' extends run through the warm-up and the window. Workers
// finish the pair they are in (cancelling an acquire in flight would make it indeterminate
// and cost its connection), for at most the acquire wait plus 10 s; holders finish the extend
// they are in and then release their keys.
func Run(ctx context.Context, cfg Config) Result {
	keys := max(cfg.Keys, 1)
	last := make([]atomic.Uint64, keys) // the newest token granted on each key
	var inversions, pairsNow atomic.Int64
	var measuring, stopping atomic.Bool
	wctx, stop := context.WithCancel(ctx)
	defer stop()

	hs := cfg.Holders
	var holders []*holder
	var setup time.Duration
	stopHolders := make(chan struct{})
	var hwg sync.WaitGroup
	if hs.Count > 0 {
		t0 := time.Now()
		holders = acquireHolders(wctx, hs, cfg.Prefix)
		setup = time.Since(t0)
		start := time.Now()
		for i, h := range holders {
			if h.t == nil {
				continue
			}
			offset := time.Duration(int64(hs.Every) * int64(i) / int64(hs.Count))
			if !hs.Spread {
				offset = client.KeepAliveStart(start.Add(offset), hs.Every).Sub(start)
			}
			hwg.Go(func() { h.extendLoop(wctx, hs, start, offset, &measuring, stopHolders) })
		}
	}
	workers := make([]*worker, len(cfg.Clients))
	var wg sync.WaitGroup
	for i, cl := range cfg.Clients {
		w := &worker{errs: map[string]int64{}}
		workers[i] = w
		key, slot := cfg.Prefix+strconv.Itoa(i%keys), &last[i%keys]
		wg.Go(func() {
			for !stopping.Load() && wctx.Err() == nil {
				t0 := time.Now()
				t, err := cl.Acquire(wctx, key, 0, cfg.Options)
				t1 := time.Now()
				on := measuring.Load()
				if err != nil {
					if on && wctx.Err() == nil {
						w.errs["acquire: "+ErrName(err)]++
					}
					continue
				}
				if prev := slot.Swap(t.Token); t.Token <= prev {
					inversions.Add(1)
				}
				rerr := t.Release(context.Background())
				t2 := time.Now()
				if !on || !measuring.Load() {
					continue
				}
				if rerr != nil {
					w.errs["release: "+ErrName(rerr)]++
					continue
				}
				w.pairs++
				pairsNow.Add(1)
				if len(w.acq) < MaxSamples {
					w.acq = append(w.acq, t1.Sub(t0))
					w.rel = append(w.rel, t2.Sub(t1))
				}
			}
		})
	}

	sleep(ctx, cfg.Warmup)
	done := func() {}
	if cfg.Measure != nil {
		done = cfg.Measure()
	}
	measuring.Store(true)
	start := time.Now()
	window(ctx, cfg.Duration, func() {
		if cfg.Progress != nil {
			cfg.Progress(time.Since(start), pairsNow.Load())
		}
	})
	measuring.Store(false)
	elapsed := time.Since(start)
	done()
	close(stopHolders)
	stopping.Store(true)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(cfg.Options.Wait + 10*time.Second):
		stop()
		<-finished
	}
	hwg.Wait()
	if hs.Count > 0 {
		releaseHolders(hs, holders)
	}
	res := tally(cfg, workers, elapsed, inversions.Load())
	if hs.Count > 0 {
		tallyHolders(&res, hs, holders, setup, elapsed)
	}
	return res
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// window waits d or until ctx ends, calling tick every second meanwhile.
func window(ctx context.Context, d time.Duration, tick func()) {
	end := time.NewTimer(d)
	defer end.Stop()
	every := time.NewTicker(time.Second)
	defer every.Stop()
	for {
		select {
		case <-every.C:
			tick()
		case <-end.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func tally(cfg Config, workers []*worker, elapsed time.Duration, inversions int64) Result {
	cls := cfg.Clients
	if cfg.Holders.Client != nil {
		cls = append(slices.Clip(cls), cfg.Holders.Client)
	}
	res := Result{Clients: len(cfg.Clients), Keys: cfg.Keys, DurationS: elapsed.Seconds(), Errors: map[string]int64{},
		Inversions: inversions, Client: sumStats(cls)}
	var acq, rel []time.Duration
	for _, w := range workers {
		res.Pairs += w.pairs
		acq, rel = append(acq, w.acq...), append(rel, w.rel...)
		for k, v := range w.errs {
			res.Errors[k] += v
		}
	}
	res.PairsPerS = float64(res.Pairs) / elapsed.Seconds()
	res.AcquireMs, res.ReleaseMs = percentiles(acq), percentiles(rel)
	return res
}

// tallyHolders adds the holders' figures to res.
func tallyHolders(res *Result, hs Holders, holders []*holder, setup, elapsed time.Duration) {
	res.Holders, res.ExtendEveryS, res.HoldSetupS = hs.Count, hs.Every.Seconds(), setup.Seconds()
	res.HoldErrors = map[string]int64{}
	var ext []time.Duration
	for _, h := range holders {
		if h.t != nil {
			res.HoldersHeld++
		}
		res.Extends += h.extends
		res.ExtendsFailed += h.failed
		res.ExtendsMissed += h.missed
		ext = append(ext, h.ext...)
		for k, v := range h.errs {
			res.HoldErrors[k] += v
		}
	}
	res.ExtendsPerS = float64(res.Extends) / elapsed.Seconds()
	res.ExtendMs = percentiles(ext)
}

// ErrName is the short name a client error is counted under.
func ErrName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{client.ErrIndeterminate, "indeterminate"}, {client.ErrUnavailable, "unavailable"}, {client.ErrTimeout, "timeout"},
		{client.ErrBusy, "busy"}, {client.ErrTicketLost, "lost"}, {client.ErrNotHeld, "not_held"},
		{client.ErrTokenExhausted, "token_exhausted"}, {client.ErrQueueFull, "queue_full"}, {client.ErrClosed, "closed"},
		{client.ErrUnsupported, "unsupported"}, {client.ErrTicketEnded, "ended"}, {client.ErrExtendInProgress, "extend_in_progress"},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return "other"
}

// percentiles of d in milliseconds (p50, p90, p99, max); empty when d is.
func percentiles(d []time.Duration) map[string]float64 {
	out := map[string]float64{}
	if len(d) == 0 {
		return out
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(d))), len(d)-1)
		return float64(d[i].Microseconds()) / 1000
	}
	out["p50"], out["p90"], out["p99"] = at(0.50), at(0.90), at(0.99)
	out["max"] = float64(d[len(d)-1].Microseconds()) / 1000
	return out
}

// sumStats adds up the client counters that say whether the run was clean.
func sumStats(cls []*client.Client) map[string]uint64 {
	out := map[string]uint64{}
	for _, cl := range cls {
		s := cl.Stats()
		out["indeterminate"] += s.Indeterminate
		out["compensations_sent"] += s.CompensationsSent
		out["compensations_dropped"] += s.CompensationsDropped
		out["failovers"] += s.Failovers
		out["reconnects"] += s.Reconnects
	}
	return out
}
