package history

import (
	"fmt"
	"sort"
	"time"
)

// Violation kinds, one per property Check tests.
const (
	VOverlap      = "overlap"         // two holders of a key whose believed holds overlap
	VDuplicate    = "duplicate_token" // one token granted twice
	VTokenOrder   = "token_order"     // a grant after another in real time got a lower token
	VEarlyNotHeld = "early_not_held"  // a release well before its deadline answered N
	VNoRecovery   = "no_recovery"     // no grant within the bound after a healed fault
	VNodeStart    = "node_start"      // a node process that did not start
)

// Defaults of Options.
const (
	DefaultRecoveryBound = 5 * time.Second
	DefaultNotHeldMargin = time.Second
)

// Options are the bounds of Check; zero fields take the defaults above.
type Options struct {
	// RecoveryBound: every healed fault must be followed by a grant (an OK acquire answered)
	// within this long of its heal.
	RecoveryBound time.Duration
	// NotHeldMargin: a release sent at least this long before its Ticket's deadline must not
	// answer N (not held).
	NotHeldMargin time.Duration
}

// Violation is one broken property, with the operations or events that show it.
type Violation struct {
	Kind   string
	Detail string
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// Hold is a believed hold: from the grant's answer to the release sent or the ticket's
// deadline, whichever came first.
type Hold struct {
	Grant    Op
	From, To time.Duration
	Released bool // To is a release's Start, not the deadline
}

// Check tests h against every property and returns what it broke, grouped by kind in the
// order of the constants above. A clean history gives none.
//
//   - No two holders of a key whose believed holds (Holds) overlap.
//   - No token granted twice.
//   - Tokens in real-time order: a grant answered before another was invoked has the
//     lower token (tokens come from one counter for every key).
//   - No release sent NotHeldMargin or more before its ticket's deadline answered N (before
//     that deadline, and not to a resend; see checkNotHeld).
//   - After every healed fault, a grant answered within RecoveryBound of the heal.
//   - Every node start served.
func Check(h History, o Options) []Violation {
	if o.RecoveryBound == 0 {
		o.RecoveryBound = DefaultRecoveryBound
	}
	if o.NotHeldMargin == 0 {
		o.NotHeldMargin = DefaultNotHeldMargin
	}
	grants := Grants(h)
	var out []Violation
	out = append(out, checkOverlap(Holds(h))...)
	out = append(out, checkDuplicates(grants)...)
	out = append(out, checkOrder(grants)...)
	out = append(out, checkNotHeld(h, o.NotHeldMargin)...)
	out = append(out, checkRecovery(h, grants, o.RecoveryBound)...)
	for _, s := range h.Starts {
		if !s.OK {
			out = append(out, Violation{VNodeStart, fmt.Sprintf("%s started at %s did not serve: %s", s.Node, ms(s.At), s.Detail)})
		}
	}
	return out
}

// Grants returns the OK acquires of h, in the order recorded.
func Grants(h History) []Op {
	var g []Op
	for _, op := range h.Ops {
		if op.Kind == Acquire && op.Result == OK {
			g = append(g, op)
		}
	}
	return g
}

// Holds returns the believed hold of every grant: [its End, min(the Start of the first
// release of its key and token sent after it, its Deadline)]. Empty holds are left out.
func Holds(h History) []Hold {
	type kt struct {
		key   string
		token uint64
	}
	released := map[kt]time.Duration{}
	for _, op := range h.Ops {
		if op.Kind != Release {
			continue
		}
		k := kt{op.Key, op.Token}
		if at, ok := released[k]; !ok || op.Start < at {
			released[k] = op.Start
		}
	}
	var out []Hold
	for _, g := range Grants(h) {
		hd := Hold{Grant: g, From: g.End, To: g.Deadline}
		if at, ok := released[kt{g.Key, g.Token}]; ok && at >= g.End && at < hd.To {
			hd.To, hd.Released = at, true
		}
		if hd.To > hd.From {
			out = append(out, hd)
		}
	}
	return out
}

// checkOverlap sweeps each key's holds by start, against the hold that reaches furthest.
func checkOverlap(holds []Hold) []Violation {
	byKey := map[string][]Hold{}
	for _, hd := range holds {
		byKey[hd.Grant.Key] = append(byKey[hd.Grant.Key], hd)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Violation
	for _, k := range keys {
		hs := byKey[k]
		sort.SliceStable(hs, func(i, j int) bool { return hs[i].From < hs[j].From })
		far := hs[0]
		for _, b := range hs[1:] {
			if b.From < far.To {
				out = append(out, Violation{VOverlap, fmt.Sprintf("key %s: %s overlaps %s by %s",
					k, b, far, ms(far.To-b.From))})
			}
			if b.To > far.To {
				far = b
			}
		}
	}
	return out
}

func checkDuplicates(grants []Op) []Violation {
	seen := map[uint64]Op{}
	var out []Violation
	for _, g := range grants {
		if prev, dup := seen[g.Token]; dup {
			out = append(out, Violation{VDuplicate, fmt.Sprintf("token %d granted twice: %s and %s", g.Token, prev, g)})
			continue
		}
		seen[g.Token] = g
	}
	return out
}

// checkOrder walks the grants by invocation, keeping the highest token among those
// answered before the one at hand was invoked.
func checkOrder(grants []Op) []Violation {
	byEnd := append([]Op(nil), grants...)
	sort.SliceStable(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
	byStart := append([]Op(nil), grants...)
	sort.SliceStable(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	var out []Violation
	var top *Op
	i := 0
	for _, b := range byStart {
		for ; i < len(byEnd) && byEnd[i].End < b.Start; i++ {
			if top == nil || byEnd[i].Token > top.Token {
				top = &byEnd[i]
			}
		}
		if top != nil && top.Token >= b.Token {
			out = append(out, Violation{VTokenOrder, fmt.Sprintf("%s was invoked after %s was answered, with a token not above it", b, *top)})
		}
	}
	return out
}

// checkNotHeld finds releases sent margin or more before their ticket's deadline and
// answered N before that deadline. The server decided between the release's Start and End,
// and no server may expire a lease before the client's deadline (it counts the lease from
// the grant, which follows the frame's write the deadline counts from), so such an N says
// the lock was lost early. An N answered after the deadline proves nothing: the release may
// have reached the server late (a partition delays it, TCP delivers it after the heal) and
// found the lock expired; Summary counts those (NotHeldDelayed). Neither does an N answered
// to a resend (Resent): the first attempt may have released the lock before its connection
// was lost; Summary counts those too (NotHeldResent).
func checkNotHeld(h History, margin time.Duration) []Violation {
	var out []Violation
	for _, op := range h.Ops {
		if earlyNotHeld(op, margin) && op.End < op.Deadline && !op.Resent {
			out = append(out, Violation{VEarlyNotHeld, fmt.Sprintf("%s answered N %s before its ticket's deadline %s",
				op, ms(op.Deadline-op.Start), ms(op.Deadline))})
		}
	}
	return out
}

func checkRecovery(h History, grants []Op, bound time.Duration) []Violation {
	var out []Violation
	for _, f := range h.Faults {
		if f.Heal == 0 {
			continue
		}
		first, ok := FirstGrantAfter(grants, f.Heal)
		switch {
		case !ok:
			out = append(out, Violation{VNoRecovery, fmt.Sprintf("%s: no grant at all after the heal (run ended at %s)", f, ms(h.End))})
		case first.End-f.Heal > bound:
			out = append(out, Violation{VNoRecovery, fmt.Sprintf("%s: first grant %s after the heal, more than %s: %s",
				f, ms(first.End-f.Heal), bound, first)})
		}
	}
	return out
}

// earlyNotHeld: a release sent margin or more before its ticket's deadline, answered N.
func earlyNotHeld(op Op, margin time.Duration) bool {
	return op.Kind == Release && op.Result == NotHeld && op.Deadline-op.Start >= margin
}

// FirstGrantAfter is the grant answered first at or after at.
func FirstGrantAfter(grants []Op, at time.Duration) (Op, bool) {
	var best Op
	found := false
	for _, g := range grants {
		if g.End >= at && (!found || g.End < best.End) {
			best, found = g, true
		}
	}
	return best, found
}

// ms formats a duration since the start as seconds with millisecond precision.
func ms(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func (op Op) String() string {
	s := fmt.Sprintf("[w%d %s %s %s..%s %s", op.Worker, op.Kind, op.Key, ms(op.Start), ms(op.End), op.Result)
	if op.Token != 0 {
		s += fmt.Sprintf(" token %d", op.Token)
	}
	if op.Deadline != 0 {
		s += " deadline " + ms(op.Deadline)
	}
	if op.Resent {
		s += " resent"
	}
	if op.Why != "" {
		s += " (" + op.Why + ")"
	}
	return s + "]"
}

func (hd Hold) String() string {
	end := "deadline"
	if hd.Released {
		end = "release sent"
	}
	return fmt.Sprintf("hold of token %d by w%d %s..%s (%s)", hd.Grant.Token, hd.Grant.Worker, ms(hd.From), ms(hd.To), end)
}

func (f Fault) String() string {
	return fmt.Sprintf("fault %s of %v at %s healed %s", f.Kind, f.Nodes, ms(f.Start), ms(f.Heal))
}
