package history

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// extended is a small history of holders that extend, correct by the client's rule, with a
// case of each kind near its edge. Key e: token 1 (lease 3 s) is extended three times
// (confirmed at 1 s and 2 s, an unknown answer at 3 s that keeps the deadline, a timeout
// that changes nothing, confirmed again at 3.7 s) and released at 7 s; token 4, waiting since
// 1 s, is granted at 7.02 s. Key f: token 2 is extended once (to 5 s) and runs out; token 3
// is granted at 5.001 s; token 2's extend after its deadline ended nothing (the client sent
// nothing), and one answered unsupported changed nothing either.
func extended() History {
	return History{
		Seed: 9, Nodes: 3, End: 12 * sec,
		Ops: []Op{
			{Worker: 1, Kind: Acquire, Key: "e", Start: 0, End: msd(10), Result: OK, Token: 1, Deadline: msd(3000)},
			{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(1000), End: msd(1010), Result: OK, Deadline: msd(3997)},
			{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(2000), End: msd(2010), Result: OK, Deadline: msd(4997)},
			// Unknown: the ticket reports min(4.997 s, 3.001 s + 3 s x (1 - rho)).
			{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(3000), End: msd(3500), Result: Indeterminate, Deadline: msd(4997), Why: "no answer"},
			{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(3600), End: msd(3610), Result: Timeout, Deadline: msd(4997)},
			{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(3700), End: msd(3710), Result: OK, Deadline: msd(6697)},
			{Worker: 1, Kind: Release, Key: "e", Token: 1, Start: msd(6600), End: msd(6610), Result: OK, Deadline: msd(6697)},
			{Worker: 2, Kind: Acquire, Key: "e", Start: msd(1000), End: msd(7020), Result: OK, Token: 4, Deadline: msd(10000)},
			{Worker: 2, Kind: Release, Key: "e", Token: 4, Start: msd(8000), End: msd(8010), Result: OK, Deadline: msd(10000)},

			{Worker: 3, Kind: Acquire, Key: "f", Start: msd(10), End: msd(20), Result: OK, Token: 2, Deadline: msd(3000)},
			{Worker: 3, Kind: Extend, Key: "f", Token: 2, Lease: 3 * sec, Start: msd(1990), End: msd(2005), Result: OK, Deadline: msd(5000)},
			{Worker: 3, Kind: Extend, Key: "f", Token: 2, Lease: 3 * sec, Start: msd(3000), End: msd(3005), Result: Unsupported, Deadline: msd(5000), Why: "answered E unsupported"},
			{Worker: 3, Kind: Extend, Key: "f", Token: 2, Lease: 3 * sec, Start: msd(5100), End: msd(5100), Result: Ended, Deadline: msd(5000)},
			{Worker: 4, Kind: Acquire, Key: "f", Start: msd(2500), End: msd(5001), Result: OK, Token: 3, Deadline: msd(8000)},
			{Worker: 3, Kind: Release, Key: "f", Token: 2, Start: msd(5200), End: msd(5210), Result: NotHeld, Deadline: msd(5000)},
		},
		Faults: []Fault{{Kind: "kill-9-leader", Nodes: []string{"n1"}, Start: msd(2900), Heal: msd(4000)}},
	}
}

// op returns the index of the op of kind on token whose Start is at.
func opAt(t *testing.T, h History, kind OpKind, token uint64, at time.Duration) int {
	t.Helper()
	for i, op := range h.Ops {
		if op.Kind == kind && op.Token == token && op.Start == at {
			return i
		}
	}
	t.Fatalf("no %s of token %d at %s", kind, token, ms(at))
	return -1
}

func holdOf(t *testing.T, h History, token uint64) Hold {
	t.Helper()
	for _, hd := range Holds(h) {
		if hd.Grant.Token == token {
			return hd
		}
	}
	t.Fatalf("no hold of token %d", token)
	return Hold{}
}

func TestExtendedHistoryPasses(t *testing.T) {
	h := extended()
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("extended history: %d violations:\n%s", len(vs), join(vs))
	}
	// The holds end where the client's rule puts them.
	if hd := holdOf(t, h, 1); hd.To != msd(6600) || !hd.Released || hd.Extended != 3 || len(hd.Extends) != 5 {
		t.Fatalf("token 1: %s, %d extends", hd, len(hd.Extends))
	}
	if hd := holdOf(t, h, 2); hd.To != msd(5000) || hd.Released || hd.Extended != 1 || len(hd.Extends) != 2 {
		t.Fatalf("token 2: %s, %d extends (the one after its deadline is not in it)", hd, len(hd.Extends))
	}
	// It survives the JSON the chaos runner writes.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back History
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if vs := Check(back, Options{}); len(vs) != 0 || holdOf(t, back, 1).To != msd(6600) || back.Ops[1].Lease != 3*sec {
		t.Fatalf("after JSON: %s", join(vs))
	}
}

func TestPlantedExtendedOverlap(t *testing.T) {
	// Token 3 granted at 4.5 s: after token 2's first deadline, inside its extended one.
	h := extended()
	h.Ops[opAt(t, h, Acquire, 3, msd(2500))].End = msd(4500)
	vs := Check(h, Options{})
	only(t, vs, VOverlap, 1)
	if !strings.Contains(vs[0].Detail, "token 2") || !strings.Contains(vs[0].Detail, "token 3") || !strings.Contains(vs[0].Detail, "1 extends confirmed") {
		t.Fatalf("the violation does not name both tokens and the extension: %s", vs[0])
	}
	// Without the extend the same grant is fine: the extension is what the grant overlaps.
	i := opAt(t, h, Extend, 2, msd(1990))
	h.Ops = append(h.Ops[:i], h.Ops[i+1:]...)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("token 3 after token 2's unextended deadline: %s", join(vs))
	}

	// Token 4 granted 1 ms before token 1's release was sent, after every deadline token 1
	// had before its last confirmed extend.
	h = extended()
	h.Ops[opAt(t, h, Acquire, 4, msd(1000))].End = msd(6599)
	only(t, Check(h, Options{}), VOverlap, 1)
}

func TestPlantedExtendNotHolder(t *testing.T) {
	// Token 2's extend at 5.1 s, after token 3's grant was answered (5.001 s), confirmed. It
	// was also sent after token 2's deadline, which the client never does.
	h := extended()
	x := opAt(t, h, Extend, 2, msd(5100))
	h.Ops[x].End, h.Ops[x].Result, h.Ops[x].Deadline = msd(5110), OK, msd(8097)
	vs := Check(h, Options{})
	// The extend was outside the hold, so it does not lengthen it: no overlap.
	if k := kinds(vs); len(k) != 2 || k[VExtendNotHolder] != 1 || k[VExtendDeadline] != 1 {
		t.Fatalf("got %v:\n%s", k, join(vs))
	}
	for _, v := range vs {
		if v.Kind == VExtendNotHolder && (!strings.Contains(v.Detail, "token 3") || !strings.Contains(v.Detail, "later")) {
			t.Fatalf("the violation does not name the later grant: %s", v)
		}
	}

	// Token 3 granted 1 ms before token 2's extend at 1.99 s was invoked: the extend is in
	// token 2's hold (its deadline was 3 s), confirmed for a token that no longer held the key.
	// The grant overlaps token 2's hold too.
	h = extended()
	g := opAt(t, h, Acquire, 3, msd(2500))
	h.Ops[g].Start, h.Ops[g].End = msd(1000), msd(1989)
	vs = Check(h, Options{})
	if k := kinds(vs); len(k) != 2 || k[VExtendNotHolder] != 1 || k[VOverlap] != 1 {
		t.Fatalf("got %v:\n%s", k, join(vs))
	}
	// Answered at 1.99 s, the moment the extend was invoked: not before it, so no proof that
	// token 2 had lost the key.
	h.Ops[g].End = msd(1990)
	if k := kinds(Check(h, Options{})); k[VExtendNotHolder] != 0 {
		t.Fatalf("grant answered as the extend was invoked: %v", k)
	}

	// Token 1 released (answered R at 6.61 s), then extended and confirmed.
	h = extended()
	h.Ops = append(h.Ops, Op{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(6700), End: msd(6710), Result: OK, Deadline: msd(9697)})
	vs = Check(h, Options{})
	if k := kinds(vs); len(k) != 2 || k[VExtendNotHolder] != 1 || k[VExtendDeadline] != 1 {
		t.Fatalf("got %v:\n%s", k, join(vs))
	}

	// A token never granted the key, extended and confirmed: only that.
	h = extended()
	h.Ops = append(h.Ops, Op{Worker: 5, Kind: Extend, Key: "f", Token: 1, Lease: 3 * sec, Start: msd(9000), End: msd(9010), Result: OK, Deadline: msd(11997)})
	vs = Check(h, Options{})
	only(t, vs, VExtendNotHolder, 1)
	if !strings.Contains(vs[0].Detail, "no grant of token 1 on key f") {
		t.Fatalf("%s", vs[0])
	}
	// Not confirmed, it proves nothing.
	h.Ops[len(h.Ops)-1].Result = NotHeld
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("N for a token never granted: %s", join(vs))
	}
}

func TestIndeterminateExtendDoesNotLengthen(t *testing.T) {
	// Token 2's only extend answered unknown, with the ticket's deadline unchanged (as the
	// client reports it): token 3 granted 1 ms after the first deadline is fine.
	h := extended()
	x := opAt(t, h, Extend, 2, msd(1990))
	g := opAt(t, h, Acquire, 3, msd(2500))
	h.Ops[x].Result = Indeterminate
	h.Ops[g].End = msd(3001)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("grant after the deadline an unknown extend kept: %s", join(vs))
	}
	if hd := holdOf(t, h, 2); hd.To != msd(3000) || hd.Extended != 0 {
		t.Fatalf("token 2: %s", hd)
	}
	// Even if the record says a later deadline (a client that counted it): the checker keeps
	// the earlier one.
	h.Ops[x].Deadline = msd(5000)
	if vs := Check(h, Options{}); len(vs) != 0 || holdOf(t, h, 2).To != msd(3000) {
		t.Fatalf("an unknown extend lengthened the hold: %s", join(vs))
	}
	// An unknown extend with a shorter lease shortens it: a grant at 2.6 s is then fine.
	h.Ops[x].Deadline = msd(2500)
	h.Ops[g].End = msd(2600)
	if vs := Check(h, Options{}); len(vs) != 0 || holdOf(t, h, 2).To != msd(2500) {
		t.Fatalf("an unknown shorter extend: %s", join(vs))
	}
	// Definite failures change nothing either, whatever deadline they carry.
	for _, r := range []Result{Timeout, Unavailable, Unsupported, Ended, Other} {
		h := extended()
		h.Ops[x].Result, h.Ops[x].Deadline = r, msd(9000)
		h.Ops[g].End = msd(3001)
		if vs := Check(h, Options{}); len(vs) != 0 || holdOf(t, h, 2).To != msd(3000) {
			t.Fatalf("%s: %s", r, join(vs))
		}
	}
	// The same extend confirmed makes that grant an overlap.
	h = extended()
	h.Ops[g].End = msd(3001)
	only(t, Check(h, Options{}), VOverlap, 1)
}

func TestPlantedExtendEarlyNotHeld(t *testing.T) {
	// Token 2's extend at 1.99 s answered N, 1.01 s before its deadline: lost early.
	h := extended()
	x := opAt(t, h, Extend, 2, msd(1990))
	h.Ops[x].Result = NotHeld
	vs := Check(h, Options{})
	only(t, vs, VEarlyNotHeld, 1)
	if !strings.Contains(vs[0].Detail, "extend") || !strings.Contains(vs[0].Detail, "token 2") {
		t.Fatalf("%s", vs[0])
	}
	// The hold ends at that answer: token 3 granted at 2.1 s is no overlap on top.
	h.Ops[opAt(t, h, Acquire, 3, msd(2500))].End = msd(2100)
	h.Ops[opAt(t, h, Acquire, 3, msd(2500))].Start = msd(2050)
	only(t, Check(h, Options{}), VEarlyNotHeld, 1)
	// Invoked inside the margin (2.001 s, 999 ms before the deadline): no violation.
	h = extended()
	h.Ops[x].Result, h.Ops[x].Start = NotHeld, msd(2001)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("N 999 ms before the deadline: %s", join(vs))
	}
	// Invoked early but answered after the deadline (delayed): not a violation, counted.
	h.Ops[x].Start, h.Ops[x].End = msd(1500), msd(3000)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("N answered at the deadline: %s", join(vs))
	}
	if s := Summarize(h, 0); s.NotHeldDelayed != 1 {
		t.Fatalf("delayed N of an extend not counted: %+v", s)
	}
	// An N after a confirmed extend is early against the extended deadline.
	h = extended()
	h.Ops = append(h.Ops, Op{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(4500), End: msd(4510), Result: NotHeld, Deadline: msd(6697)})
	only(t, Check(h, Options{}), VEarlyNotHeld, 1)
}

func TestPlantedExtendDeadline(t *testing.T) {
	// A confirmed deadline (5 s) later than the answer (1.995 s) plus the lease (3 s).
	h := extended()
	x := opAt(t, h, Extend, 2, msd(1990))
	h.Ops[x].End = msd(1995)
	vs := Check(h, Options{})
	only(t, vs, VExtendDeadline, 1)
	if !strings.Contains(vs[0].Detail, "more than its lease") {
		t.Fatalf("%s", vs[0])
	}
	h.Ops[x].End = msd(2000) // exactly the answer plus the lease: allowed
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("%s", join(vs))
	}
	// A confirmed extend invoked after its release was sent (answered later than R would
	// name it not held, so the release here is still unanswered).
	h = extended()
	r := opAt(t, h, Release, 1, msd(6600))
	h.Ops[r].Result = Indeterminate
	h.Ops = append(h.Ops, Op{Worker: 1, Kind: Extend, Key: "e", Token: 1, Lease: 3 * sec, Start: msd(6650), End: msd(6660), Result: OK, Deadline: msd(9600)})
	vs = Check(h, Options{})
	only(t, vs, VExtendDeadline, 1)
	if !strings.Contains(vs[0].Detail, "outside") {
		t.Fatalf("%s", vs[0])
	}
	// Invoked exactly at the deadline is outside; 1 ms before is inside.
	h = extended()
	x = opAt(t, h, Extend, 2, msd(1990))
	h.Ops[x].Start = msd(3000)
	only(t, Check(h, Options{}), VExtendDeadline, 1)
	h.Ops[x].Start = msd(2999)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("%s", join(vs))
	}
}

func TestSummaryExtends(t *testing.T) {
	s := Summarize(extended(), 0)
	if s.Extends != 8 || s.ExtendsConfirmed != 4 || s.ExtendsUnsupported != 1 || s.Ops["extend indeterminate"] != 1 {
		t.Fatalf("extends: %+v", s)
	}
	// Token 1's hold (0.01..6.6 s) had the fault begin at 2.9 s and an extend confirmed at
	// 3.71 s; token 2's (0.02..5 s) none after 2.9 s.
	if s.HoldsExtended != 2 || s.HoldsKeptThroughFault != 1 || s.LongestExtendedHold != msd(6590) {
		t.Fatalf("holds: %+v", s)
	}
	if s.Acquires != 4 || s.Indeterminate != 0 {
		t.Fatalf("extends counted as acquires: %+v", s)
	}
	text := s.String()
	for _, want := range []string{"extends: 8, confirmed 4, unsupported 1: answered E unsupported 1 (revision 2 never seen on every node)", "holds extended 2, kept through a fault 1, longest 6.59s"} {
		if !strings.Contains(text, want) {
			t.Fatalf("summary lacks %q:\n%s", want, text)
		}
	}
	h := extended()
	h.LeasesOn = msd(1500)
	if text := Summarize(h, 0).String(); !strings.Contains(text, "revision 2 on at 1.5s") {
		t.Fatalf("summary:\n%s", text)
	}
}

// generateExtended builds a random history of a correct lock service whose holders extend:
// per key, holds one after another, each granted after the one before it ended by the
// client's rule. A third of the holds extend every lease/3 (confirmed mostly; some unknown,
// timed out or unsupported, each with the deadline the client reports) until their hold is
// over, then release or let the lease run out.
func generateExtended(seed uint64) History {
	rng := rand.New(rand.NewPCG(seed, 2))
	const rhoMargin = 3 * time.Millisecond // lease x rho for a 3 s lease
	var h History
	var grants []Op
	var others []Op // releases and extends, by the index of their grant
	var of []int
	for k := range 3 {
		key := fmt.Sprintf("k%d", k)
		t := msd(rng.IntN(200))
		for range 40 {
			lease := time.Duration(3+rng.IntN(3)) * sec
			g := Op{Worker: rng.IntN(8), Kind: Acquire, Key: key, Start: max(0, t-msd(rng.IntN(2000))), End: t, Result: OK,
				Deadline: t + lease - msd(rng.IntN(50))}
			grants = append(grants, g)
			gi := len(grants) - 1
			end := g.Deadline
			if rng.IntN(3) == 0 {
				stop := g.End + lease*time.Duration(2+rng.IntN(3))
				at := g.End + lease/3
				for n := 0; n < 40 && at < end && at < stop; n++ {
					x := Op{Worker: g.Worker, Kind: Extend, Key: key, Lease: lease, Start: at, End: at + msd(1+rng.IntN(20))}
					written := at + msd(rng.IntN(2))
					switch p := rng.IntN(10); {
					case p < 7:
						x.Result, end = OK, written+lease-rhoMargin
						at = x.Start + lease/3
					case p < 8:
						x.Result, x.End = Indeterminate, at+msd(rng.IntN(900))
						end = min(end, written+lease-rhoMargin)
						at = x.End + msd(100)
					case p < 9:
						x.Result, at = Timeout, x.End+msd(100)
					default:
						x.Result, at = Unsupported, x.End+msd(100)
					}
					x.Deadline = end
					others, of = append(others, x), append(of, gi)
				}
			}
			next := end + msd(1+rng.IntN(30))
			if rng.IntN(3) > 0 { // released before the deadline
				at := g.End + msd(rng.IntN(int((end-g.End)/time.Millisecond)-50))
				// Extends after the release was sent are not the client's: drop them.
				for i := len(others) - 1; i >= 0 && of[i] == gi && others[i].Start >= at; i-- {
					others, of = others[:i], of[:i]
				}
				if i := len(others) - 1; i >= 0 && of[i] == gi {
					end = min(end, others[i].Deadline)
				}
				others, of = append(others, Op{Worker: g.Worker, Kind: Release, Key: key, Start: at, End: at + msd(5), Result: OK, Deadline: end}), append(of, gi)
				next = at + msd(1+rng.IntN(30))
			}
			t = next + msd(rng.IntN(300))
		}
	}
	order := make([]int, len(grants))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return grants[order[a]].End < grants[order[b]].End })
	for tok, i := range order {
		grants[i].Token = uint64(tok + 1)
	}
	h.Ops = append(h.Ops, grants...)
	for i, op := range others {
		op.Token = grants[of[i]].Token
		h.Ops = append(h.Ops, op)
	}
	for _, op := range h.Ops {
		h.End = max(h.End, op.Deadline+sec)
	}
	rng.Shuffle(len(h.Ops), func(i, j int) { h.Ops[i], h.Ops[j] = h.Ops[j], h.Ops[i] })
	return h
}

func TestGeneratedExtendedHistories(t *testing.T) {
	confirmed := 0
	for seed := range uint64(40) {
		h := generateExtended(seed)
		if vs := Check(h, Options{}); len(vs) != 0 {
			t.Fatalf("seed %d: clean history of %d ops: %d violations:\n%s", seed, len(h.Ops), len(vs), join(vs))
		}
		// An extended hold, and the next grant of its key.
		holds := Holds(h)
		sort.Slice(holds, func(i, j int) bool { return holds[i].From < holds[j].From })
		var a, b Hold
		for i, hd := range holds {
			if hd.Extended == 0 || hd.To-hd.Grant.Deadline < 100*time.Millisecond {
				continue
			}
			for _, n := range holds[i+1:] {
				if n.Grant.Key == hd.Grant.Key {
					a, b = hd, n
					break
				}
			}
			if b.Grant.Token != 0 {
				break
			}
		}
		if b.Grant.Token == 0 {
			continue
		}
		confirmed++
		at := func(h History, token uint64) int {
			for i, op := range h.Ops {
				if op.Kind == Acquire && op.Token == token {
					return i
				}
			}
			t.Fatalf("seed %d: no grant of token %d", seed, token)
			return -1
		}
		// b answered 1 ms before a's extended hold ended, after a's first deadline.
		p := generateExtended(seed)
		i := at(p, b.Grant.Token)
		p.Ops[i].End = a.To - msd(1)
		p.Ops[i].Start = min(p.Ops[i].Start, p.Ops[i].End)
		if k := kinds(Check(p, Options{})); k[VOverlap] == 0 {
			t.Fatalf("seed %d: b answered inside a's extended hold (%s, first deadline %s): %v", seed, a, ms(a.Grant.Deadline), k)
		}
		// a extended and confirmed after b's grant was answered.
		p = generateExtended(seed)
		p.Ops = append(p.Ops, Op{Kind: Extend, Key: a.Grant.Key, Token: a.Grant.Token, Lease: 3 * sec,
			Start: b.From + msd(1), End: b.From + msd(2), Result: OK, Deadline: b.From + msd(2)})
		if k := kinds(Check(p, Options{})); k[VExtendNotHolder] != 1 {
			t.Fatalf("seed %d: extend of token %d after token %d's grant: %v", seed, a.Grant.Token, b.Grant.Token, k)
		}
	}
	if confirmed < 20 {
		t.Fatalf("only %d of 40 generated histories had an extended hold followed by another grant", confirmed)
	}
}
