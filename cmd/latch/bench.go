package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

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
			"period and grouped onto the client's keep-alive grid as Ticket.KeepAlive groups them\n" +
			"(--extend-spread: each at its own moment), all on one client of --extend-conns\n" +
			"connections; they need a server that offers protocol revision 2. The report adds\n" +
			"extends/s, extend latency and every extend that failed (exit 1 if any did).",
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
			&cli.BoolFlag{Name: "extend-spread", Usage: "each holder extends at its own moment, not on the keep-alive grid"},
		),
		Action: benchAction,
	}
}

func benchAction(c *cli.Context) error {
	opts, _, err := acquireInputs(c, 0, "") // --wait and --lease as acquire takes them (0s is no lease)
	if err != nil {
		return err
	}
	ccfg, err := clientConfig(c)
	if err != nil {
		return err
	}
	cfg, closeClients, err := bench.Setup{
		Client: ccfg, Clients: c.Int("clients"), Keys: c.Int("keys"), Prefix: c.String("prefix"), Options: opts,
		Warmup: c.Duration("warmup"), Duration: c.Duration("duration"),
		Holders: c.Int("extenders"), HolderConns: c.Int("extend-conns"), Every: c.Duration("extend-every"), HoldLease: c.Duration("extend-lease"),
		Spread: c.Bool("extend-spread"),
	}.Open(c.Context)
	switch {
	case errors.Is(err, bench.ErrSetup):
		return cli.Exit("latch bench: "+strings.TrimPrefix(err.Error(), bench.ErrSetup.Error()+": "), exitUsage)
	case errors.Is(err, bench.ErrNoRevision2):
		return cli.Exit("latch bench: --extenders: "+err.Error(), exitUnavailable)
	case err != nil:
		return exitFor("bench", err)
	}
	defer closeClients()

	if path := c.String("cpuprofile"); path != "" { // created now, so a bad path fails before the run
		prof, err := os.Create(path)
		if err != nil {
			return cli.Exit(fmt.Sprintf("latch bench: --cpuprofile: %v", err), exitUsage)
		}
		defer prof.Close()
		cfg.Measure = bench.CPUProfile(prof, func(err error) { stderrf(c, "latch bench: --cpuprofile: %v", err) })
	}
	var prev int64
	cfg.Progress = func(elapsed time.Duration, pairs int64) {
		stderrf(c, "bench: %5.1fs  %9d pairs  %9.0f pairs/s", elapsed.Seconds(), pairs, float64(pairs-prev))
		prev = pairs
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
