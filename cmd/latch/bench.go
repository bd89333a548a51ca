package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/client/bench"
)

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
	ccfg, err := clientConfig(c)
	if err != nil {
		return err
	}
	ccfg.Conns = 1 // one connection per worker
	cls := make([]*client.Client, clients)
	for i := range cls {
		cl, err := client.New(ccfg)
		if err != nil {
			return usageErr("bench", "%s", strings.TrimPrefix(err.Error(), "latch: "))
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

	var prof *os.File // --cpuprofile: created now, so a bad path fails before the run
	if path := c.String("cpuprofile"); path != "" {
		if prof, err = os.Create(path); err != nil {
			return cli.Exit(fmt.Sprintf("latch bench: --cpuprofile: %v", err), exitUsage)
		}
		defer prof.Close()
	}
	var prev int64
	cfg := bench.Config{
		Clients: cls, Keys: keys, Prefix: c.String("prefix"), Options: opts, Warmup: warm, Duration: dur,
		Progress: func(elapsed time.Duration, pairs int64) {
			stderrf(c, "bench: %5.1fs  %9d pairs  %9.0f pairs/s", elapsed.Seconds(), pairs, float64(pairs-prev))
			prev = pairs
		},
	}
	if prof != nil {
		cfg.Measure = func() func() {
			if err := pprof.StartCPUProfile(prof); err != nil {
				stderrf(c, "latch bench: --cpuprofile: %v", err)
				return func() {}
			}
			return pprof.StopCPUProfile
		}
	}
	res := bench.Run(c.Context, cfg)
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(res)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "clients %d  keys %d  window %.1fs\n", clients, keys, res.DurationS)
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
