// Package gctune sets the Go garbage collector's target for a latch server by how much it
// holds. A server's heap is mostly its lock table (and on the deciding node its view), which
// lives as long as the locks do; with the runtime's default (GOGC=100) the heap may reach
// twice that before a collection, so a node holding 1,000,000 keys kept about 310 bytes of
// RSS a key for 150 of live data. Run lowers GOGC as the live heap grows, so that the garbage
// allowed above it stays near MinGarbage or Share of it, whichever is larger: a small table
// keeps the default (few collections), a large one is held to about 1.4 times its size.
//
// An operator's own choice wins: with the GOGC environment variable set, Run changes
// nothing. GOMEMLIMIT works alongside it, as it does with any GOGC.
package gctune

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	// MinGarbage is the garbage always allowed above the live heap (64 MiB): below
	// MinGarbage*100/Default of live data the default stands.
	MinGarbage = 64 << 20
	// Share is the percentage of the live heap allowed as garbage once that is more than
	// MinGarbage: the lowest GOGC that Run sets.
	Share = 40
	// Default is the runtime's GOGC, and the highest Run sets.
	Default = 100
	// Every is how often Run looks at the live heap.
	Every = 2 * time.Second
)

// Percent is the GOGC for a live heap of live bytes: Default while MinGarbage is more than
// Default percent of it, then whatever allows MinGarbage of garbage, never below Share.
func Percent(live uint64) int {
	if live == 0 {
		return Default
	}
	p := uint64(MinGarbage) * 100 / live
	return int(min(max(p, Share), Default))
}

const liveMetric = "/gc/heap/live:bytes"

// Live is the heap the last collection found reachable, in bytes (runtime/metrics).
func Live() uint64 {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Run sets GOGC to Percent(Live()) now and every Every until ctx ends, unless the GOGC
// environment variable is set. It logs each change at debug level.
func Run(ctx context.Context, log hclog.Logger) {
	if _, set := os.LookupEnv("GOGC"); set {
		log.Debug("GOGC is set in the environment: the collector's target is left as set")
		return
	}
	t := time.NewTicker(Every)
	defer t.Stop()
	cur := Default
	for {
		if p := Percent(Live()); p != cur {
			debug.SetGCPercent(p)
			log.Debug("garbage collector target changed", "gogc", p, "live_bytes", Live())
			cur = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
