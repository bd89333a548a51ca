package history

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

const sec = time.Second

func msd(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// clean is a small history that breaks nothing, with a case of each kind near its edge:
// a hold released, a hold that ran out and a waiter granted just after it, a late release
// answered N after the deadline, an N 0.5 s before the deadline (inside the margin), grants
// on two keys at once with tokens in either order while they overlap in time, a fault
// healed and followed by a grant 4.9 s later, and node starts that served.
func clean() History {
	return History{
		Seed: 7, Nodes: 3, End: 20 * sec,
		Ops: []Op{
			{Worker: 1, Kind: Acquire, Key: "a", Start: 0, End: msd(10), Result: OK, Token: 1, Deadline: msd(3000)},
			{Worker: 2, Kind: Acquire, Key: "a", Start: msd(100), End: msd(520), Result: OK, Token: 2, Deadline: msd(3100)},
			{Worker: 1, Kind: Release, Key: "a", Start: msd(500), End: msd(510), Result: OK, Token: 1, Deadline: msd(3000)},
			// w2 lets token 2 run out; w3 waited and is granted just after its deadline.
			{Worker: 3, Kind: Acquire, Key: "a", Start: msd(1000), End: msd(3101), Result: OK, Token: 5, Deadline: msd(6000)},
			{Worker: 2, Kind: Release, Key: "a", Start: msd(3300), End: msd(3310), Result: NotHeld, Token: 2, Deadline: msd(3100)},
			{Worker: 3, Kind: Release, Key: "a", Start: msd(5500), End: msd(5600), Result: NotHeld, Token: 5, Deadline: msd(6000)},
			// Two keys at once: tokens 4 and 3 granted while both calls were in flight.
			{Worker: 4, Kind: Acquire, Key: "b", Start: msd(2000), End: msd(2100), Result: OK, Token: 4, Deadline: msd(4000)},
			{Worker: 5, Kind: Acquire, Key: "c", Start: msd(2050), End: msd(2150), Result: OK, Token: 3, Deadline: msd(4050)},
			{Worker: 6, Kind: Acquire, Key: "a", Start: msd(4000), End: msd(9000), Result: Indeterminate, Why: "no answer"},
			{Worker: 7, Kind: Acquire, Key: "b", Start: msd(4000), End: msd(4100), Result: Timeout},
			{Worker: 4, Kind: Acquire, Key: "b", Start: msd(10000), End: msd(14900), Result: OK, Token: 6, Deadline: msd(16000)},
			{Worker: 4, Kind: Release, Key: "b", Start: msd(15000), End: msd(15100), Result: Indeterminate, Token: 6, Deadline: msd(16000), Why: "no answer"},
			{Worker: 5, Kind: Acquire, Key: "b", Start: msd(15000), End: msd(16001), Result: OK, Token: 7, Deadline: msd(19000)},
		},
		Faults: []Fault{
			{Kind: "kill-leader", Nodes: []string{"n1"}, Start: msd(7000), Heal: msd(10000), Leader: msd(11500)},
			{Kind: "pause-leader", Nodes: []string{"n2"}, Start: msd(17000)}, // never healed: not checked
		},
		Starts: []NodeStart{{Node: "n1", At: 0, Took: msd(300), OK: true}, {Node: "n1", At: msd(10000), Took: msd(200), OK: true}},
	}
}

func kinds(vs []Violation) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v.Kind]++
	}
	return m
}

// only fails unless vs are exactly n violations of kind.
func only(t *testing.T, vs []Violation, kind string, n int) {
	t.Helper()
	if k := kinds(vs); len(k) != 1 || k[kind] != n {
		t.Fatalf("want exactly %d %s violations, got %v:\n%s", n, kind, k, join(vs))
	}
}

func join(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("  " + v.String() + "\n")
	}
	return b.String()
}

func TestCleanHistoryPasses(t *testing.T) {
	if vs := Check(clean(), Options{}); len(vs) != 0 {
		t.Fatalf("clean history: %d violations:\n%s", len(vs), join(vs))
	}
}

// generate builds a random history of a correct lock service: per key, holds one after
// another (each granted after the one before it was released or ran out), tokens given in
// the order grants were answered, releases before and after the deadline, and faults each
// followed by a grant within the bound.
func generate(seed uint64) History {
	rng := rand.New(rand.NewPCG(seed, 1))
	var h History
	type rel struct {
		op  Op
		idx int
	}
	var grants []Op
	var releases []rel
	for k := range 4 {
		key := fmt.Sprintf("k%d", k)
		t := msd(rng.IntN(200))
		for range 60 {
			lease := msd(1000 + 1000*rng.IntN(3))
			start := t - msd(rng.IntN(2000))
			g := Op{Worker: rng.IntN(8), Kind: Acquire, Key: key, Start: max(0, start), End: t, Result: OK, Deadline: t + lease - msd(rng.IntN(50))}
			grants = append(grants, g)
			next := g.Deadline + msd(1+rng.IntN(30)) // the lease runs out
			if rng.IntN(3) > 0 {                     // released before the deadline
				at := g.End + msd(rng.IntN(int(lease/time.Millisecond)-100))
				releases = append(releases, rel{Op{Worker: g.Worker, Kind: Release, Key: key, Start: at, End: at + msd(5), Result: OK, Deadline: g.Deadline}, len(grants) - 1})
				next = at + msd(1+rng.IntN(30))
			} else if rng.IntN(2) == 0 { // released after the deadline: N
				at := g.Deadline + msd(rng.IntN(500))
				releases = append(releases, rel{Op{Worker: g.Worker, Kind: Release, Key: key, Start: at, End: at + msd(5), Result: NotHeld, Deadline: g.Deadline}, len(grants) - 1})
			}
			t = next + msd(rng.IntN(300))
		}
	}
	// Tokens in the order the grants were answered.
	order := make([]int, len(grants))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return grants[order[a]].End < grants[order[b]].End })
	for tok, i := range order {
		grants[i].Token = uint64(tok + 1)
	}
	h.Ops = append(h.Ops, grants...)
	for _, r := range releases {
		r.op.Token = grants[r.idx].Token
		h.Ops = append(h.Ops, r.op)
	}
	for _, g := range grants {
		h.End = max(h.End, g.Deadline+sec)
	}
	// Faults healed just before a grant.
	for range 5 {
		g := grants[rng.IntN(len(grants))]
		heal := max(msd(1), g.End-msd(rng.IntN(4900)))
		h.Faults = append(h.Faults, Fault{Kind: "kill-follower", Nodes: []string{"n2"}, Start: heal - 3*sec, Heal: heal})
	}
	rng.Shuffle(len(h.Ops), func(i, j int) { h.Ops[i], h.Ops[j] = h.Ops[j], h.Ops[i] })
	return h
}

func TestGeneratedCleanHistoriesPass(t *testing.T) {
	for seed := range uint64(50) {
		h := generate(seed)
		if vs := Check(h, Options{}); len(vs) != 0 {
			t.Fatalf("seed %d: clean history of %d ops: %d violations:\n%s", seed, len(h.Ops), len(vs), join(vs))
		}
	}
}

func TestPlantedOverlap(t *testing.T) {
	// w2's grant answered before w1 sent its release.
	h := clean()
	h.Ops[1].End = msd(499)
	vs := Check(h, Options{})
	only(t, vs, VOverlap, 1)
	if !strings.Contains(vs[0].Detail, "token 2") || !strings.Contains(vs[0].Detail, "token 1") {
		t.Fatalf("the violation does not name both tokens: %s", vs[0])
	}

	// A grant answered 1 ms before the deadline of a hold that ran out.
	h = clean()
	h.Ops[3].End = msd(3099)
	only(t, Check(h, Options{}), VOverlap, 1)

	// One long hold overlapped by two short ones that do not overlap each other: both are
	// found, the second against the long hold (not its neighbour in start order).
	h = History{End: 10 * sec, Ops: []Op{
		{Kind: Acquire, Key: "x", End: 0, Result: OK, Token: 1, Deadline: 3 * sec},
		{Kind: Acquire, Key: "x", Start: 0, End: msd(100), Result: OK, Token: 2, Deadline: 3 * sec},
		{Kind: Release, Key: "x", Start: msd(200), End: msd(210), Result: OK, Token: 2, Deadline: 3 * sec},
		{Kind: Acquire, Key: "x", Start: 0, End: msd(1000), Result: OK, Token: 3, Deadline: 4 * sec},
		{Kind: Release, Key: "x", Start: msd(1500), End: msd(1510), Result: OK, Token: 3, Deadline: 4 * sec},
	}}
	// Tokens 2 and 3 were invoked at 0, before token 1's answer at 0 (not after): no order
	// violation. Only the overlaps.
	only(t, Check(h, Options{}), VOverlap, 2)

	// The same holds on different keys overlap nothing.
	h.Ops[1].Key, h.Ops[2].Key, h.Ops[3].Key, h.Ops[4].Key = "y", "y", "z", "z"
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("holds on different keys: %s", join(vs))
	}
}

func TestPlantedDuplicateToken(t *testing.T) {
	h := clean()
	h.Ops[7].Token = 4 // key c gets key b's token, while both were in flight
	only(t, Check(h, Options{}), VDuplicate, 1)
}

func TestPlantedTokenOrder(t *testing.T) {
	h := clean()
	h.Ops = append(h.Ops, Op{Worker: 8, Kind: Acquire, Key: "d", Start: msd(16100), End: msd(16200), Result: OK, Token: 6, Deadline: msd(18000)})
	// Token 6 was granted at 14.9 s, again at 16.2 s: a duplicate and out of order (not
	// above token 7, answered at 16.001 s before this one was invoked).
	k := kinds(Check(h, Options{}))
	if k[VTokenOrder] != 1 || k[VDuplicate] != 1 || len(k) != 2 {
		t.Fatalf("got %v", k)
	}
	// Tokens 6 and 7 swapped: the grant invoked at 15 s, after the one answered at 14.9 s,
	// gets the lower token.
	h = clean()
	h.Ops[10].Token, h.Ops[12].Token = 7, 6
	vs := Check(h, Options{})
	only(t, vs, VTokenOrder, 1)
	if !strings.Contains(vs[0].Detail, "token 7") || !strings.Contains(vs[0].Detail, "token 6") {
		t.Fatalf("the violation does not name both tokens: %s", vs[0])
	}
}

func TestPlantedEarlyNotHeld(t *testing.T) {
	h := clean()
	h.Ops[5].Start, h.Ops[5].End = msd(4999), msd(5010) // N 1.001 s before the deadline 6 s
	vs := Check(h, Options{})
	only(t, vs, VEarlyNotHeld, 1)
	if !strings.Contains(vs[0].Detail, "token 5") {
		t.Fatalf("%s", vs[0])
	}
	// Exactly the margin counts.
	h.Ops[5].Start = msd(5000)
	only(t, Check(h, Options{}), VEarlyNotHeld, 1)
	h.Ops[5].Start = msd(5001)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("N 999 ms before the deadline: %s", join(vs))
	}
	// A wider margin forgives it; a narrower one catches more.
	h.Ops[5].Start = msd(5500)
	only(t, Check(h, Options{NotHeldMargin: 400 * time.Millisecond}), VEarlyNotHeld, 1)
	// Sent 3 s early but answered after the deadline (delayed by a partition): the server
	// may have decided after the lease ran out. Not a violation; the summary counts it.
	h.Ops[5].Start, h.Ops[5].End = msd(3000), msd(6000)
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("N answered at the deadline: %s", join(vs))
	}
	if s := Summarize(h, 0); s.NotHeldDelayed != 1 || !strings.Contains(s.String(), "(delayed past it) 1, to a resend 0") {
		t.Fatalf("delayed N not counted: %d\n%s", s.NotHeldDelayed, s)
	}
	h.Ops[5].End = msd(5999)
	only(t, Check(h, Options{}), VEarlyNotHeld, 1)
	// The same N answered to a resend: the first attempt may have released it.
	h.Ops[5].Resent = true
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("N to a resend: %s", join(vs))
	}
	if s := Summarize(h, 0); s.NotHeldResent != 1 || s.NotHeldDelayed != 0 || !strings.Contains(s.String(), "to a resend 1") {
		t.Fatalf("N to a resend not counted: %+v\n%s", s, s)
	}
}

func TestPlantedNoRecovery(t *testing.T) {
	h := clean()
	h.Ops[10].End = msd(15001) // the first grant after the 10 s heal comes 5.001 s later
	h.Ops[11].Start = msd(15100)
	vs := Check(h, Options{})
	only(t, vs, VNoRecovery, 1)
	if !strings.Contains(vs[0].Detail, "kill-leader") {
		t.Fatalf("%s", vs[0])
	}
	if vs := Check(h, Options{RecoveryBound: 6 * sec}); len(vs) != 0 {
		t.Fatalf("with a 6 s bound: %s", join(vs))
	}
	// A healed fault after which nothing was granted at all.
	h = clean()
	h.Faults = append(h.Faults, Fault{Kind: "partition-leader", Nodes: []string{"n3"}, Start: msd(17000), Heal: msd(18000)})
	only(t, Check(h, Options{}), VNoRecovery, 1)
}

func TestPlantedNodeStart(t *testing.T) {
	h := clean()
	h.Starts = append(h.Starts, NodeStart{Node: "n2", At: msd(12000), Took: 30 * sec, Detail: "no 'latch serving' within 30 s"})
	vs := Check(h, Options{})
	only(t, vs, VNodeStart, 1)
	if !strings.Contains(vs[0].Detail, "n2") || !strings.Contains(vs[0].Detail, "30 s") {
		t.Fatalf("%s", vs[0])
	}
}

func TestPlantedNodeExit(t *testing.T) {
	h := clean()
	h.Exits = append(h.Exits, NodeExit{Node: "n1", At: msd(12500), State: "signal: killed"})
	vs := Check(h, Options{})
	only(t, vs, VNodeExit, 1)
	if !strings.Contains(vs[0].Detail, "n1 exited at 12.500s") || !strings.Contains(vs[0].Detail, "signal: killed") {
		t.Fatalf("%s", vs[0])
	}
}

func TestSummary(t *testing.T) {
	s := Summarize(clean(), 0)
	if s.Acquires != 9 || s.Indeterminate != 1 || s.Ops["acquire ok"] != 7 || s.Ops["release not_held"] != 2 {
		t.Fatalf("counts: %+v", s)
	}
	if s.IndeterminateWhy["no answer"] != 1 || s.IndeterminateDuring["none"] != 1 {
		t.Fatalf("indeterminate: %v %v", s.IndeterminateWhy, s.IndeterminateDuring)
	}
	// Holds: 1, 5 (its N came at 5.5 s, before its deadline: the holder stopped there) and 6
	// ended by a release; 2 (its release came after the deadline), 3, 4 and 7 ran out.
	if s.HoldsReleased != 3 || s.HoldsExpired != 4 {
		t.Fatalf("holds released %d expired %d", s.HoldsReleased, s.HoldsExpired)
	}
	if len(s.Faults) != 2 || s.Faults[0].Kind != "kill-leader" || len(s.Faults[0].Recovery) != 1 ||
		s.Faults[0].Recovery[0] != msd(4900) || s.Faults[0].Gap[0] != msd(7900) || s.Faults[0].Leader[0] != msd(1500) {
		t.Fatalf("faults: %+v", s.Faults)
	}
	text := s.String()
	for _, want := range []string{"3 nodes, seed 7", "acquire ok 7", "kill-leader", "x1", "recovery 4.9s", "leader 1.5s", "1 of 9 (11.11%)", "no answer 1"} {
		if !strings.Contains(text, want) {
			t.Fatalf("summary lacks %q:\n%s", want, text)
		}
	}
}

// TestRecorderConcurrent records from many goroutines at once (run it with -race) and
// places a deadline derived from time.Now on the recorder's clock.
func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder(1, 3)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				st := r.Now()
				deadline := time.Now().Add(2 * sec)
				r.AddOp(Op{Worker: w, Kind: Acquire, Key: "k", Start: st, End: r.Now(), Result: OK, Token: uint64(w*1000 + i + 1), Deadline: r.Rel(deadline)})
				if i%50 == 0 {
					r.AddFault(Fault{Kind: "f", Start: st})
					r.AddStart(NodeStart{Node: "n", At: st, OK: true})
					_ = r.History()
				}
			}
		}()
	}
	wg.Wait()
	h := r.History()
	if len(h.Ops) != 1600 || len(h.Faults) != 32 || len(h.Starts) != 32 {
		t.Fatalf("recorded %d ops, %d faults, %d starts", len(h.Ops), len(h.Faults), len(h.Starts))
	}
	for _, op := range h.Ops {
		if op.End < op.Start || op.Deadline-op.Start < 2*sec-10*time.Millisecond || op.Deadline > h.End+2*sec {
			t.Fatalf("times off the recorder's clock: %s (end of history %s)", op, h.End)
		}
	}
}

// TestGeneratedPlanted plants one violation of each kind in generated clean histories and
// checks that it is found.
func TestGeneratedPlanted(t *testing.T) {
	for seed := range uint64(20) {
		h := generate(seed)
		holds := Holds(h)
		sort.Slice(holds, func(i, j int) bool { return holds[i].From < holds[j].From })
		var a, b Hold // two holds of one key, b right after a
		for i := range holds {
			for j := i + 1; j < len(holds); j++ {
				if holds[j].Grant.Key == holds[i].Grant.Key {
					a, b = holds[i], holds[j]
					break
				}
			}
			if b.Grant.Token != 0 {
				break
			}
		}
		at := func(h History, token uint64) int {
			for i, op := range h.Ops {
				if op.Kind == Acquire && op.Token == token {
					return i
				}
			}
			t.Fatalf("seed %d: no grant of token %d", seed, token)
			return -1
		}
		// b answered 1 ms before a's hold ended (it was invoked before then too).
		p := generate(seed)
		i := at(p, b.Grant.Token)
		p.Ops[i].End = a.To - msd(1)
		p.Ops[i].Start = min(p.Ops[i].Start, p.Ops[i].End)
		if kinds(Check(p, Options{}))[VOverlap] == 0 {
			t.Fatalf("seed %d: b answered inside a's hold: no overlap found", seed)
		}
		// b granted a's token.
		p = generate(seed)
		p.Ops[at(p, b.Grant.Token)].Token = a.Grant.Token
		if kinds(Check(p, Options{}))[VDuplicate] == 0 {
			t.Fatalf("seed %d: duplicate not found", seed)
		}
		// The last grant answered gets token 1's place in the order (token 0 is never granted).
		p = generate(seed)
		last := 0
		for i, op := range p.Ops {
			if op.Kind == Acquire && op.End > p.Ops[last].End {
				last = i
			}
		}
		p.Ops[last].Token = 1
		if k := kinds(Check(p, Options{})); k[VTokenOrder] == 0 {
			t.Fatalf("seed %d: order violation not found: %v", seed, k)
		}
	}
}
