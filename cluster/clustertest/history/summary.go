package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Summary is what a run did, in figures.
type Summary struct {
	Seed     uint64
	Nodes    int
	Duration time.Duration
	// Ops counts operations by "kind result", e.g. "acquire ok".
	Ops map[string]int
	// Holds: believed holds ended by a release sent, and by the ticket's deadline.
	HoldsReleased, HoldsExpired int
	// Extends: extend calls, those confirmed (OK), and those answered unsupported (the cluster
	// did not serve revision 2). HoldsExtended: holds with a confirmed extend; of those,
	// HoldsKeptThroughFault had one confirmed after a fault began during the hold.
	// LongestExtendedHold is the longest of them. UnsupportedWhy counts the unsupported ones
	// by Why.
	Extends, ExtendsConfirmed, ExtendsUnsupported int
	UnsupportedWhy                                map[string]int
	HoldsExtended, HoldsKeptThroughFault          int
	LongestExtendedHold                           time.Duration
	// LeasesOn: when every node was seen serving revision 2 (0: never).
	LeasesOn time.Duration
	// NotHeldDelayed: releases (and extends) sent DefaultNotHeldMargin or more before their
	// ticket's deadline, answered N after it; NotHeldResent: such releases answered N to a
	// resend (neither is a violation; see checkNotHeld).
	NotHeldDelayed, NotHeldResent int
	Faults                        []FaultSummary
	NodeStarts, NodeStartFailed   int
	// TermsLed: terms some node was seen to lead, of LeaderViews leader views recorded.
	TermsLed, LeaderViews int
	// Acquires and the indeterminate ones, by Why and by the fault in effect when invoked
	// (invoked between a fault's start and its heal plus the recovery bound; else "none").
	Acquires, Indeterminate int
	IndeterminateWhy        map[string]int
	IndeterminateDuring     map[string]int
}

// FaultSummary is every fault of one kind.
type FaultSummary struct {
	Kind  string
	Count int
	// Recovery: per fault, from its heal to the first grant answered after it; Leader, from
	// its heal to an agreed leader (where the nemesis saw one).
	Recovery, Leader []time.Duration
	// Gap: per fault, the longest stretch without a grant answered between its start and
	// that first grant after its heal.
	Gap []time.Duration
}

// Summarize sums h up; bound is the recovery bound used to attribute indeterminate
// acquires to faults (0: DefaultRecoveryBound).
func Summarize(h History, bound time.Duration) Summary {
	if bound == 0 {
		bound = DefaultRecoveryBound
	}
	s := Summary{Seed: h.Seed, Nodes: h.Nodes, Duration: h.End, Ops: map[string]int{}, LeasesOn: h.LeasesOn,
		UnsupportedWhy: map[string]int{}, IndeterminateWhy: map[string]int{}, IndeterminateDuring: map[string]int{}}
	for _, op := range h.Ops {
		s.Ops[string(op.Kind)+" "+string(op.Result)]++
		if op.Kind == Extend {
			s.Extends++
			switch op.Result {
			case OK:
				s.ExtendsConfirmed++
			case Unsupported:
				s.ExtendsUnsupported++
				s.UnsupportedWhy[op.Why]++
			}
		}
		switch {
		case !earlyNotHeld(op, DefaultNotHeldMargin):
		case op.Resent:
			s.NotHeldResent++
		case op.End >= op.Deadline:
			s.NotHeldDelayed++
		}
		if op.Kind != Acquire {
			continue
		}
		s.Acquires++
		if op.Result == Indeterminate {
			s.Indeterminate++
			s.IndeterminateWhy[op.Why]++
			s.IndeterminateDuring[faultAt(h, op.Start, bound)]++
		}
	}
	holds, exts := model(h)
	for _, hd := range holds {
		if hd.Released {
			s.HoldsReleased++
		} else {
			s.HoldsExpired++
		}
		if hd.Extended > 0 {
			s.HoldsExtended++
			s.LongestExtendedHold = max(s.LongestExtendedHold, hd.To-hd.From)
			if keptThroughFault(hd, h.Faults) {
				s.HoldsKeptThroughFault++
			}
		}
	}
	for _, e := range exts {
		if earlyExtendNotHeld(e, DefaultNotHeldMargin) && e.op.End >= e.before {
			s.NotHeldDelayed++
		}
	}
	s.Faults = summarizeFaults(h)
	s.TermsLed, s.LeaderViews = Terms(h.Leaders)
	for _, st := range h.Starts {
		s.NodeStarts++
		if !st.OK {
			s.NodeStartFailed++
		}
	}
	return s
}

// keptThroughFault: a fault began during hd, and an extend of hd was confirmed after that.
func keptThroughFault(hd Hold, faults []Fault) bool {
	for _, f := range faults {
		if f.Start < hd.From || f.Start >= hd.To {
			continue
		}
		for _, x := range hd.Extends {
			if x.Result == OK && x.End > f.Start {
				return true
			}
		}
	}
	return false
}

// faultAt names the kind of the first fault in effect at t.
func faultAt(h History, t, bound time.Duration) string {
	for _, f := range h.Faults {
		end := h.End
		if f.Heal != 0 {
			end = f.Heal + bound
		}
		if t >= f.Start && t <= end {
			return f.Kind
		}
	}
	return "none"
}

func summarizeFaults(h History) []FaultSummary {
	grants := Grants(h)
	ends := make([]time.Duration, len(grants))
	for i, g := range grants {
		ends[i] = g.End
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	byKind := map[string]*FaultSummary{}
	var order []string
	for _, f := range h.Faults {
		fs := byKind[f.Kind]
		if fs == nil {
			fs = &FaultSummary{Kind: f.Kind}
			byKind[f.Kind] = fs
			order = append(order, f.Kind)
		}
		fs.Count++
		if f.Heal == 0 {
			continue
		}
		if f.Leader != 0 {
			fs.Leader = append(fs.Leader, max(0, f.Leader-f.Heal))
		}
		first, ok := FirstGrantAfter(grants, f.Heal)
		if !ok {
			continue
		}
		fs.Recovery = append(fs.Recovery, first.End-f.Heal)
		fs.Gap = append(fs.Gap, longestGap(ends, f.Start, first.End))
	}
	out := make([]FaultSummary, 0, len(order))
	for _, k := range order {
		out = append(out, *byKind[k])
	}
	return out
}

// longestGap is the longest stretch of [from, to] without an element of the sorted ends.
func longestGap(ends []time.Duration, from, to time.Duration) time.Duration {
	i := sort.Search(len(ends), func(i int) bool { return ends[i] >= from })
	prev, gap := from, time.Duration(0)
	for ; i < len(ends) && ends[i] <= to; i++ {
		gap = max(gap, ends[i]-prev)
		prev = ends[i]
	}
	return max(gap, to-prev)
}

// String is the summary as a few lines of text.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run: %d nodes, seed %d, %s\n", s.Nodes, s.Seed, s.Duration.Round(time.Millisecond))
	fmt.Fprintf(&b, "operations by result: %s\n", counts(s.Ops))
	fmt.Fprintf(&b, "believed holds: %d ended by a release, %d by the ticket's deadline\n", s.HoldsReleased, s.HoldsExpired)
	on := "never seen on every node"
	if s.LeasesOn != 0 {
		on = "on at " + s.LeasesOn.Round(time.Millisecond).String()
	}
	why := ""
	if s.ExtendsUnsupported > 0 {
		why = ": " + counts(s.UnsupportedWhy)
	}
	fmt.Fprintf(&b, "extends: %d, confirmed %d, unsupported %d%s (revision 2 %s); holds extended %d, kept through a fault %d, longest %s\n",
		s.Extends, s.ExtendsConfirmed, s.ExtendsUnsupported, why, on, s.HoldsExtended, s.HoldsKeptThroughFault, s.LongestExtendedHold.Round(time.Millisecond))
	fmt.Fprintf(&b, "releases and extends sent >= %s before the deadline answered N, not violations: after the deadline (delayed past it) %d, to a resend %d\n",
		DefaultNotHeldMargin, s.NotHeldDelayed, s.NotHeldResent)
	fmt.Fprintf(&b, "node starts: %d, failed %d\n", s.NodeStarts, s.NodeStartFailed)
	fmt.Fprintf(&b, "leadership: %d terms seen led, from %d status views\n", s.TermsLed, s.LeaderViews)
	fmt.Fprintf(&b, "faults by kind (recovery: heal to first grant; leader: heal to an agreed leader; gap: longest stretch without a grant from fault to recovery):\n")
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  %-23s x%d  recovery %s  leader %s  gap %s\n", f.Kind, f.Count, spread(f.Recovery), spread(f.Leader), spread(f.Gap))
	}
	share := 0.0
	if s.Acquires > 0 {
		share = 100 * float64(s.Indeterminate) / float64(s.Acquires)
	}
	fmt.Fprintf(&b, "indeterminate acquires: %d of %d (%.2f%%)", s.Indeterminate, s.Acquires, share)
	if s.Indeterminate > 0 {
		fmt.Fprintf(&b, "; why: %s; during: %s", counts(s.IndeterminateWhy), counts(s.IndeterminateDuring))
	}
	b.WriteString("\n")
	return b.String()
}

// counts formats a count map, largest first.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// spread formats durations as min/median/max, or "-" when there are none.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	if len(s) == 1 {
		return r(s[0])
	}
	return fmt.Sprintf("min %s median %s max %s", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}
