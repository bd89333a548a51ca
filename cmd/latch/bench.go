package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
)

// maxSamples bounds the latency samples one bench worker keeps (8 bytes each).
const maxSamples = 2_000_000

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "load a latch server with acquire+release pairs and report throughput and latency",
		Description: "Each of --clients workers has its own client (one connection) and loops: acquire key\n" +
			"(worker i uses key i mod --keys), release it. --keys 1 makes every worker contend for one\n" +
			"lock. Every grant's token is checked to be above the previous holder's of the same key.",
		Flags: append(clientFlags(),
			&cli.IntFlag{Name: "clients", Value: 16, Usage: "concurrent workers, each with its own connection"},
			&cli.IntFlag{Name: "keys", Value: 16, Usage: "distinct keys (1: all workers contend)"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "measurement window"},
			&cli.DurationFlag{Name: "warmup", Value: 2 * time.Second, Usage: "load before the window, not counted"},
			&cli.DurationFlag{Name: "wait", Value: 10 * time.Second, Usage: "acquire wait"},
			&cli.DurationFlag{Name: "lease", Value: 30 * time.Second, Usage: "acquire lease"},
			&cli.StringFlag{Name: "prefix", Value: "bench/", Usage: "prefix of every key"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of text"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the load generator during the window to `FILE`"},
		),
		Action: benchAction,
	}
}

// benchWorker is one worker's tally; only its own goroutine writes it until the run ends.
type benchWorker struct {
	acq, rel []time.Duration
	pairs    int64
	errs     map[string]int64
}

type benchResult struct {
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
}

func benchAction(c *cli.Context) error {
	clients, keys := c.Int("clients"), c.Int("keys")
	dur, warm := c.Duration("duration"), c.Duration("warmup")
	if clients < 1 || keys < 1 || dur <= 0 || warm < 0 {
		return cli.Exit("latch bench: --clients and --keys must be at least 1, --duration above 0", exitUsage)
	}
	if dur+warm > time.Hour {
		return cli.Exit("latch bench: --duration plus --warmup is limited to one hour", exitUsage)
	}
	opts, _, err := acquireInputs(c, 0, "") // --wait and --lease as acquire takes them (0s is no lease)
	if err != nil {
		return err
	}
	tc, err := clientTLS(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("latch bench: %v", err), exitUsage)
	}
	secret, err := clientSecret(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("latch bench: %v", err), exitUsage)
	}
	cls := make([]*client.Client, clients)
	for i := range cls {
		cl, err := client.New(client.Config{Servers: c.StringSlice("servers"), Secret: secret, Conns: 1, TLS: tc})
		if err != nil {
			return cli.Exit(fmt.Sprintf("latch bench: %v", err), exitUsage)
		}
		defer cl.Close()
		cls[i] = cl
	}
	pctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	err = cls[0].Ping(pctx)
	cancel()
	if err != nil {
		return exitFor("bench", err)
	}

	// last[k] is the newest token granted on key k: a grant at or below it is an inversion.
	last := make([]atomic.Uint64, keys)
	var inversions atomic.Int64
	var measuring, stopping atomic.Bool
	var pairsNow atomic.Int64
	ctx, stop := context.WithCancel(c.Context)
	defer stop()
	workers := make([]*benchWorker, clients)
	var wg sync.WaitGroup
	for i := range clients {
		w := &benchWorker{errs: map[string]int64{}}
		workers[i] = w
		key := c.String("prefix") + strconv.Itoa(i%keys)
		slot := &last[i%keys]
		wg.Add(1)
		go func(cl *client.Client) {
			defer wg.Done()
			for !stopping.Load() && ctx.Err() == nil {
				t0 := time.Now()
				t, err := cl.Acquire(ctx, key, 0, opts)
				t1 := time.Now()
				on := measuring.Load()
				if err != nil {
					if on && ctx.Err() == nil {
						w.errs["acquire: "+errName(err)]++
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
					w.errs["release: "+errName(rerr)]++
					continue
				}
				w.pairs++
				pairsNow.Add(1)
				if len(w.acq) < maxSamples {
					w.acq = append(w.acq, t1.Sub(t0))
					w.rel = append(w.rel, t2.Sub(t1))
				}
			}
		}(cls[i])
	}

	time.Sleep(warm)
	stopProfile, err := startProfile(c.String("cpuprofile"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("latch bench: --cpuprofile: %v", err), exitUsage)
	}
	measuring.Store(true)
	start := time.Now()
	tick := time.NewTicker(time.Second)
	var prev int64
	for end := time.After(dur); ; {
		select {
		case <-tick.C:
			n := pairsNow.Load()
			stderrf(c, "bench: %5.1fs  %9d pairs  %9.0f pairs/s", time.Since(start).Seconds(), n, float64(n-prev))
			prev = n
			continue
		case <-end:
		case <-c.Context.Done():
		}
		break
	}
	measuring.Store(false)
	elapsed := time.Since(start)
	tick.Stop()
	stopProfile()
	// Let every worker finish the pair it is in; cancelling in-flight acquires would turn
	// them into indeterminate results and cost their connections.
	stopping.Store(true)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(opts.Wait + 10*time.Second):
		stop()
		<-finished
	}

	res := benchResult{Clients: clients, Keys: keys, DurationS: elapsed.Seconds(), Errors: map[string]int64{},
		Inversions: inversions.Load(), Client: sumStats(cls)}
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
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(res)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "clients %d  keys %d  window %.1fs\n", clients, keys, elapsed.Seconds())
	fmt.Fprintf(w, "pairs/s  %.0f  (%d acquire+release pairs)\n", res.PairsPerS, res.Pairs)
	for _, row := range []struct {
		name string
		p    map[string]float64
	}{{"acquire", res.AcquireMs}, {"release", res.ReleaseMs}} {
		fmt.Fprintf(w, "%-8s p50 %.3fms  p90 %.3fms  p99 %.3fms  max %.3fms\n", row.name, row.p["p50"], row.p["p90"], row.p["p99"], row.p["max"])
	}
	fmt.Fprintf(w, "fencing inversions %d\n", res.Inversions)
	names := make([]string, 0, len(res.Errors))
	for k := range res.Errors {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "%-40s %d\n", k, res.Errors[k])
	}
	if res.Inversions > 0 {
		return cli.Exit("latch bench: a grant's token was not above the previous holder's", 1)
	}
	return nil
}

// errName is the short name a bench error is counted under.
func errName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{client.ErrIndeterminate, "indeterminate"}, {client.ErrUnavailable, "unavailable"}, {client.ErrTimeout, "timeout"},
		{client.ErrBusy, "busy"}, {client.ErrNotHeld, "not_held"}, {client.ErrTokenExhausted, "token_exhausted"},
		{client.ErrQueueFull, "queue_full"}, {client.ErrClosed, "closed"},
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

// startProfile starts a CPU profile into path ("" does nothing); the returned func stops it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
