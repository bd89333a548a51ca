package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
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
			"lock. Every grant's token is checked to be above the previous holder's of the same key.\n" +
			"--extenders N adds N holders alongside: each acquires its own key (PREFIX hold/i) once and\n" +
			"extends it every --extend-every with --extend-lease, the N extends spread evenly over the\n" +
			"period, all on one client of --extend-conns connections; they need a server that offers\n" +
			"protocol revision 2. The report adds extends/s, extend latency and every extend that failed\n" +
			"(exit 1 if any did).",
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
			&cli.IntFlag{Name: "extenders", Usage: "holders that each keep one key of their own by extending it (0: none)"},
			&cli.DurationFlag{Name: "extend-every", Value: 10 * time.Second, Usage: "how often each holder extends"},
			&cli.DurationFlag{Name: "extend-lease", Value: 30 * time.Second, Usage: "the holders' lease, of their acquire and of each extend (above --extend-every)"},
			&cli.IntFlag{Name: "extend-conns", Value: 4, Usage: "connections all holders share"},
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
	newClient := func(conns int) (*client.Client, error) {
		cfg := ccfg
		cfg.Conns = conns
		cl, err := client.New(cfg)
		if err != nil {
			return nil, usageErr("bench", "%s", strings.TrimPrefix(err.Error(), "latch: "))
		}
		return cl, nil
	}
	cls := make([]*client.Client, clients)
	for i := range cls {
		if cls[i], err = newClient(1); err != nil { // one connection per worker
			return err
		}
		defer cls[i].Close()
	}
	holders := bench.Holders{Count: c.Int("extenders"), Every: c.Duration("extend-every"), Lease: c.Duration("extend-lease"), Wait: opts.Wait}
	if holders.Count > 0 {
		if c.Int("extend-conns") < 1 {
			return cli.Exit("latch bench: --extend-conns must be at least 1", exitUsage)
		}
		if holders.Client, err = newClient(c.Int("extend-conns")); err != nil {
			return err
		}
		defer holders.Client.Close()
	}
	if err := holders.Validate(); err != nil {
		return cli.Exit("latch bench: --extenders: "+err.Error(), exitUsage)
	}
	pctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	err = cls[0].Ping(pctx)
	if err == nil {
		err = holders.Ready(pctx)
	}
	cancel()
	switch {
	case errors.Is(err, bench.ErrNoRevision2):
		return cli.Exit("latch bench: --extenders: "+err.Error(), exitUnavailable)
	case err != nil:
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
		Holders: holders,
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
		err = json.NewEncoder(c.App.Writer).Encode(res)
	} else {
		err = bench.WriteText(c.App.Writer, res)
	}
	if err != nil {
		return err
	}
	if res.Inversions > 0 {
		return cli.Exit("latch bench: a grant's token was not above the previous holder's", 1)
	}
	if res.ExtendsFailed > 0 {
		return cli.Exit(fmt.Sprintf("latch bench: %d extends failed", res.ExtendsFailed), 1)
	}
	return nil
}
