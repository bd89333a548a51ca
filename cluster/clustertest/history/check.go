package history

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Violation kinds, one per property Check tests.
const (
	VOverlap         = "overlap"           // two holders of a key whose believed holds overlap
	VDuplicate       = "duplicate_token"   // one token granted twice
	VTokenOrder      = "token_order"       // a grant after another in real time got a lower token
	VEarlyNotHeld    = "early_not_held"    // a release or extend well before its deadline answered N
	VExtendNotHolder = "extend_not_holder" // an extend confirmed for a token that no longer held the key
	VExtendDeadline  = "extend_deadline"   // an extend confirmed outside its hold, or with a deadline past its lease
	VNoRecovery      = "no_recovery"       // no grant within the bound after a healed fault
	VNodeStart       = "node_start"        // a node process that did not start
	VTwoLeaders      = "two_leaders"       // two nodes claimed to lead one term
	VNodeExit        = "node_exit"         // a node process that exited without the runner stopping it
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
// deadline, whichever came first; the deadline is the grant's as the extends of its ticket
// moved it (Holds says how).
type Hold struct {
	Grant    Op
	From, To time.Duration
	Released bool // To is a release's Start, not the deadline
	// Extends are the extends of its ticket invoked during the hold, in invocation order;
	// Extended counts those confirmed (each set the deadline).
	Extends  []Op
	Extended int
}

// Check tests h against every property and returns what it broke, grouped by kind in the
// order of the constants above. A clean history gives none.
//
//   - No two holders of a key whose believed holds (Holds) overlap.
//   - No token granted twice.
//   - Tokens in real-time order: a grant answered before another was invoked has the
//     lower token (tokens come from one counter for every key).
//   - No release sent NotHeldMargin or more before its ticket's deadline answered N (before
//     that deadline, and not to a resend; see checkNotHeld); no extend invoked NotHeldMargin
//     or more before its hold's deadline then answered N before it.
//   - No extend confirmed for a token that did not hold the key when the extend was invoked:
//     one never granted the key, or whose key a later token's grant, or whose own release
//     answered R, had been answered before (checkExtendHolder).
//   - No extend of a granted ticket confirmed although invoked outside its believed hold
//     (after its deadline or its release was sent, before its grant was answered), and none whose
//     confirmed deadline is later than its answer plus its lease (checkExtendDeadline): the
//     client must neither send those nor count a lease from after the answer.
//   - After every healed fault, a grant answered within RecoveryBound of the heal.
//   - Every node start served.
//   - No term claimed by two nodes: of the leader views sampled through the run, no two
//     nodes each in raft's Leader state naming itself in one term (checkLeaders).
//   - No node process that exited unless the runner stopped it.
func Check(h History, o Options) []Violation {
	if o.RecoveryBound == 0 {
		o.RecoveryBound = DefaultRecoveryBound
	}
	if o.NotHeldMargin == 0 {
		o.NotHeldMargin = DefaultNotHeldMargin
	}
	grants := Grants(h)
	holds, exts := model(h)
	var out []Violation
	out = append(out, checkOverlap(holds)...)
	out = append(out, checkDuplicates(grants)...)
	out = append(out, checkOrder(grants)...)
	out = append(out, checkNotHeld(h, o.NotHeldMargin)...)
	out = append(out, checkExtendNotHeld(exts, o.NotHeldMargin)...)
	out = append(out, checkExtendHolder(h, exts)...)
	out = append(out, checkExtendDeadline(exts)...)
	out = append(out, checkRecovery(h, grants, o.RecoveryBound)...)
	for _, s := range h.Starts {
		if !s.OK {
			out = append(out, Violation{VNodeStart, fmt.Sprintf("%s started at %s did not serve: %s", s.Node, ms(s.At), s.Detail)})
		}
	}
	out = append(out, checkLeaders(h.Leaders)...)
	for _, e := range h.Exits {
		out = append(out, Violation{VNodeExit, fmt.Sprintf("%s exited at %s without the runner stopping it: %s", e.Node, ms(e.At), e.State)})
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
// release of its key and token sent after it, its deadline)]. Empty holds are left out.
//
// The deadline starts as the grant's Deadline, and the extends of its ticket invoked before
// the hold ends (at the deadline so far, or at the release sent) move it, in invocation order,
// by the client's own rule (package client, Ticket.Extend), with the Deadline each recorded
// (the ticket's CurrentDeadline right after the answer):
//
//   - confirmed (OK): the deadline becomes that Deadline, even when earlier (a shorter lease
//     shortens the lock);
//   - unknown (Indeterminate): the deadline becomes the earlier of the two, since an extend
//     that may have been applied may have shortened the lock and lengthens nothing;
//   - N (NotHeld): the ticket is lost; the hold ends at the answer if not before;
//   - any other result is a definite "not extended": the deadline stands.
func Holds(h History) []Hold {
	holds, _ := model(h)
	return holds
}

// extension is an extend as the model sees it: of a ticket granted in the history or not,
// and invoked during its hold (before is then the hold's deadline at that moment) or not.
type extension struct {
	op      Op
	granted bool
	inHold  bool
	before  time.Duration
}

// kt is a key and a token: one ticket.
type kt struct {
	key   string
	token uint64
}

// model computes the believed holds (see Holds) and places every extend in its hold.
func model(h History) ([]Hold, []extension) {
	released := map[kt]time.Duration{}
	extends := map[kt][]Op{}
	for _, op := range h.Ops {
		k := kt{op.Key, op.Token}
		switch op.Kind {
		case Release:
			if at, ok := released[k]; !ok || op.Start < at {
				released[k] = op.Start
			}
		case Extend:
			extends[k] = append(extends[k], op)
		}
	}
	var holds []Hold
	var exts []extension
	granted := map[kt]bool{}
	for _, g := range Grants(h) {
		k := kt{g.Key, g.Token}
		if granted[k] { // a duplicate token: checkDuplicates reports it; its extends go with the first
			holds = append(holds, hold(g, released, nil, nil)...)
			continue
		}
		granted[k] = true
		holds = append(holds, hold(g, released, extends[k], &exts)...)
	}
	for k, xs := range extends { // extends of tokens never granted the key
		if !granted[k] {
			for _, x := range xs {
				exts = append(exts, extension{op: x})
			}
		}
	}
	sort.SliceStable(exts, func(i, j int) bool { return exts[i].op.Start < exts[j].op.Start })
	return holds, exts
}

// hold is the believed hold of grant g (none if empty), given the first release sent of
// each ticket and the extends xs of g's ticket, each of which it appends to exts, if not nil.
func hold(g Op, released map[kt]time.Duration, xs []Op, exts *[]extension) []Hold {
	hd := Hold{Grant: g, From: g.End}
	end, cut := g.Deadline, time.Duration(math.MaxInt64)
	if at, ok := released[kt{g.Key, g.Token}]; ok && at >= g.End {
		cut = at
	}
	xs = append([]Op(nil), xs...)
	sort.SliceStable(xs, func(i, j int) bool { return xs[i].Start < xs[j].Start })
	for _, x := range xs {
		e := extension{op: x, granted: true}
		if x.Start >= g.End && x.Start < min(end, cut) {
			e.inHold, e.before = true, end
			hd.Extends = append(hd.Extends, x)
			switch x.Result {
			case OK:
				end = x.Deadline
				hd.Extended++
			case Indeterminate:
				end = min(end, x.Deadline)
			case NotHeld:
				end = min(end, x.End)
			}
		}
		if exts != nil {
			*exts = append(*exts, e)
		}
	}
	hd.To = end
	if cut < end {
		hd.To, hd.Released = cut, true
	}
	if hd.To > hd.From {
		return []Hold{hd}
	}
	return nil
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

// checkExtendNotHeld finds extends invoked margin or more before their hold's deadline and
// answered N before it: as for a release (checkNotHeld), no server may end a lease before
// the client's deadline, and an extend that found the lock held extends it, so even an N to
// a resend (after an attempt that may have been applied) says the lock was lost early.
func checkExtendNotHeld(exts []extension, margin time.Duration) []Violation {
	var out []Violation
	for _, e := range exts {
		if earlyExtendNotHeld(e, margin) && e.op.End < e.before {
			out = append(out, Violation{VEarlyNotHeld, fmt.Sprintf("%s answered N %s before its hold's deadline %s",
				e.op, ms(e.before-e.op.Start), ms(e.before))})
		}
	}
	return out
}

// earlyExtendNotHeld: an extend invoked during its hold margin or more before its deadline,
// answered N.
func earlyExtendNotHeld(e extension, margin time.Duration) bool {
	return e.inHold && e.op.Result == NotHeld && e.before-e.op.Start >= margin
}

// checkExtendHolder finds extends confirmed for a token that did not hold the key when the
// extend was invoked, by what the history shows: no grant of that token on that key, a grant
// of the key with a higher token answered before (tokens of a key only go up, and a lock
// never returns to an older token), or a release of that token answered R before.
func checkExtendHolder(h History, exts []extension) []Violation {
	type grantEnd struct {
		end time.Duration
		top Op // the grant of the highest token among those answered by end
	}
	byKey := map[string][]Op{}
	granted := map[kt]bool{}
	for _, g := range Grants(h) {
		byKey[g.Key] = append(byKey[g.Key], g)
		granted[kt{g.Key, g.Token}] = true
	}
	tops := map[string][]grantEnd{}
	for k, gs := range byKey {
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].End < gs[j].End })
		ts := make([]grantEnd, len(gs))
		for i, g := range gs {
			ts[i] = grantEnd{end: g.End, top: g}
			if i > 0 && ts[i-1].top.Token > g.Token {
				ts[i].top = ts[i-1].top
			}
		}
		tops[k] = ts
	}
	releasedR := map[kt]Op{} // the first release of each ticket answered R
	for _, op := range h.Ops {
		k := kt{op.Key, op.Token}
		if op.Kind == Release && op.Result == OK {
			if r, ok := releasedR[k]; !ok || op.End < r.End {
				releasedR[k] = op
			}
		}
	}
	var out []Violation
	for _, e := range exts {
		x := e.op
		if x.Result != OK {
			continue
		}
		k := kt{x.Key, x.Token}
		if !granted[k] {
			out = append(out, Violation{VExtendNotHolder, fmt.Sprintf("%s confirmed, but the history has no grant of token %d on key %s", x, x.Token, x.Key)})
			continue
		}
		ts := tops[x.Key]
		// The last grant of the key answered before the extend was invoked.
		if i := sort.Search(len(ts), func(i int) bool { return ts[i].end >= x.Start }) - 1; i >= 0 && ts[i].top.Token > x.Token {
			out = append(out, Violation{VExtendNotHolder, fmt.Sprintf("%s confirmed, but key %s was granted to the later %s before it was invoked", x, x.Key, ts[i].top)})
			continue
		}
		if r, ok := releasedR[k]; ok && r.End < x.Start {
			out = append(out, Violation{VExtendNotHolder, fmt.Sprintf("%s confirmed, but token %d was released before it was invoked: %s", x, x.Token, r)})
		}
	}
	return out
}

// checkExtendDeadline finds confirmed extends that the client should not have sent or counted
// so: invoked outside their token's believed hold (the client sends no extend at or after its
// ticket's deadline, nor once the ticket is released), or with a deadline later than their
// answer plus their lease (the client counts the lease from the extend's write, before the
// answer).
func checkExtendDeadline(exts []extension) []Violation {
	var out []Violation
	for _, e := range exts {
		x := e.op
		switch {
		case x.Result != OK || !e.granted: // never granted: checkExtendHolder
		case !e.inHold:
			out = append(out, Violation{VExtendDeadline, fmt.Sprintf("%s confirmed, but invoked outside its token's believed hold (before the grant's answer, at or after its deadline, or after its release was sent)", x)})
		case x.Deadline > x.End+x.Lease:
			out = append(out, Violation{VExtendDeadline, fmt.Sprintf("%s confirmed with a deadline %s after its answer, more than its lease %s", x, ms(x.Deadline-x.End), x.Lease)})
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
	if op.Lease != 0 {
		s += " lease " + op.Lease.String()
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
	if hd.Extended > 0 {
		end += fmt.Sprintf(", %d extends confirmed", hd.Extended)
	}
	return fmt.Sprintf("hold of token %d by w%d %s..%s (%s)", hd.Grant.Token, hd.Grant.Worker, ms(hd.From), ms(hd.To), end)
}

func (f Fault) String() string {
	return fmt.Sprintf("fault %s of %v at %s healed %s", f.Kind, f.Nodes, ms(f.Start), ms(f.Heal))
}
