package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// WriteText writes res as the text report of `latch bench`: the pairs' throughput and
// latencies, fencing inversions, the holders' extends (when there were holders), then every
// error by kind.
func WriteText(w io.Writer, res Result) error {
	p := &printer{w: w}
	p.f("clients %d  keys %d  window %.1fs\n", res.Clients, res.Keys, res.DurationS)
	p.f("pairs/s  %.0f  (%d acquire+release pairs)\n", res.PairsPerS, res.Pairs)
	p.latency("acquire", res.AcquireMs)
	p.latency("release", res.ReleaseMs)
	p.f("fencing inversions %d\n", res.Inversions)
	if res.Holders > 0 {
		p.f("holders %d  (%d took their key in %.1fs)  extend every %gs\n", res.Holders, res.HoldersHeld, res.HoldSetupS, res.ExtendEveryS)
		p.f("extends/s  %.0f  (%d extends)\n", res.ExtendsPerS, res.Extends)
		p.latency("extend", res.ExtendMs)
		p.f("extends failed %d  periods missed %d  (whole run)\n", res.ExtendsFailed, res.ExtendsMissed)
	}
	for _, k := range slices.Sorted(maps.Keys(res.Errors)) {
		p.f("%-40s %d\n", k, res.Errors[k])
	}
	for _, k := range slices.Sorted(maps.Keys(res.HoldErrors)) {
		p.f("%-40s %d\n", "hold "+k, res.HoldErrors[k])
	}
	return p.err
}

// printer keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) latency(name string, ms map[string]float64) {
	p.f("%-8s p50 %.3fms  p90 %.3fms  p99 %.3fms  max %.3fms\n", name, ms["p50"], ms["p90"], ms["p99"], ms["max"])
}
