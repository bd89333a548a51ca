package history

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// leaderViews is a run's leadership as three nodes saw it: n1 leads term 2, an election
// moves it to n2 in term 3 (n3 sees term 3 before it knows the leader, and one read of n1
// pairs term 3 with n1, the skew of a follower's view that checkLeaders ignores), n2 is
// replaced by n4, which leads term 5 after a term 4 without a leader.
func leaderViews() []LeaderView {
	return []LeaderView{
		{At: msd(100), Node: "n1", State: "Leader", Term: 2, Leader: "n1"},
		{At: msd(110), Node: "n2", State: "Follower", Term: 2, Leader: "n1"},
		{At: msd(120), Node: "n3", State: "Follower", Term: 2, Leader: "n1"},
		{At: msd(3000), Node: "n2", State: "Leader", Term: 3, Leader: "n2"},
		{At: msd(3010), Node: "n3", State: "Follower", Term: 3},
		{At: msd(3020), Node: "n1", State: "Follower", Term: 3, Leader: "n1"}, // skewed: not a claim
		{At: msd(3200), Node: "n1", State: "Follower", Term: 3, Leader: "n2"},
		{At: msd(3300), Node: "n3", State: "Follower", Term: 3, Leader: "n2"},
		{At: msd(3400), Node: "n2", State: "Leader", Term: 3, Leader: "n2"},
		{At: msd(6000), Node: "n4", State: "Candidate", Term: 4},
		{At: msd(6000), Node: "n1", State: "Candidate", Term: 4},
		{At: msd(7000), Node: "n4", State: "Leader", Term: 5, Leader: "n4"},
		{At: msd(7100), Node: "n1", State: "Follower", Term: 5, Leader: "n4"},
		// A leader whose status names someone else (it stepped down during the read): no claim.
		{At: msd(7200), Node: "n3", State: "Leader", Term: 5, Leader: "n4"},
	}
}

func TestLeaderViewsClean(t *testing.T) {
	h := clean()
	h.Leaders = leaderViews()
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("one leader per term: %d violations:\n%s", len(vs), join(vs))
	}
	if led, n := Terms(h.Leaders); led != 3 || n != len(h.Leaders) {
		t.Fatalf("Terms: %d led of %d views, want 3 of %d", led, n, len(h.Leaders))
	}
}

func TestPlantedTwoLeaders(t *testing.T) {
	h := clean()
	h.Leaders = append(leaderViews(),
		// n3 claims term 3 too, after n2 did: a second leader of term 3.
		LeaderView{At: msd(3500), Node: "n3", State: "Leader", Term: 3, Leader: "n3"},
		LeaderView{At: msd(3600), Node: "n3", State: "Leader", Term: 3, Leader: "n3"})
	vs := Check(h, Options{})
	only(t, vs, VTwoLeaders, 1)
	for _, want := range []string{"term 3", "n2 (first claimed at 3.000s) and n3 (first claimed at 3.500s)", "n1 named n2 at 3.200s", "n3 named no leader at 3.010s"} {
		if !strings.Contains(vs[0].Detail, want) {
			t.Fatalf("the violation does not say %q: %s", want, vs[0])
		}
	}

	// Two more terms with two leaders each, recorded out of order: one violation each, by term.
	h.Leaders = append(h.Leaders,
		LeaderView{At: msd(9000), Node: "n1", State: "Leader", Term: 9, Leader: "n1"},
		LeaderView{At: msd(8000), Node: "n4", State: "Leader", Term: 9, Leader: "n4"},
		LeaderView{At: msd(7500), Node: "n1", State: "Leader", Term: 5, Leader: "n1"})
	vs = Check(h, Options{})
	only(t, vs, VTwoLeaders, 3)
	for i, want := range []string{"term 3 ", "term 5 led by n4 (first claimed at 7.000s) and n1", "term 9 led by n4 (first claimed at 8.000s) and n1"} {
		if !strings.HasPrefix(vs[i].Detail, want) {
			t.Fatalf("violation %d: want it to start %q: %s", i, want, vs[i])
		}
	}

	// The same node claiming one term twice (its leadership seen again) is one leader.
	h = clean()
	h.Leaders = append(leaderViews(), LeaderView{At: msd(9000), Node: "n4", State: "Leader", Term: 5, Leader: "n4"})
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("one node claiming its term again: %s", join(vs))
	}
}

// TestLeaderViewsConcurrent records views from many goroutines (run it with -race).
func TestLeaderViewsConcurrent(t *testing.T) {
	r := NewRecorder(1, 3)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				node := []string{"n1", "n2", "n3"}[w%3]
				// Term i is led by the node i names; every goroutine agrees.
				leader := []string{"n1", "n2", "n3"}[i%3]
				state := "Follower"
				if node == leader {
					state = "Leader"
				}
				r.AddLeaderView(LeaderView{At: r.Now(), Node: node, State: state, Term: uint64(i), Leader: leader})
				if i%100 == 0 {
					r.AddResources(ResourceSample{At: r.Now(), Slot: node, PID: 1, RSS: 1, FDs: 1})
					_ = r.History()
				}
			}
		}()
	}
	wg.Wait()
	h := r.History()
	if len(h.Leaders) != 1800 || len(h.Resources) != 18 {
		t.Fatalf("recorded %d views, %d samples", len(h.Leaders), len(h.Resources))
	}
	if vs := checkLeaders(h.Leaders); len(vs) != 0 {
		t.Fatalf("%s", join(vs))
	}
	h.Leaders = append(h.Leaders, LeaderView{At: r.Now(), Node: "n2", State: "Leader", Term: 0, Leader: "n2"})
	only(t, checkLeaders(h.Leaders), VTwoLeaders, 1)
}

func TestResourceGrowth(t *testing.T) {
	var ss []ResourceSample
	for i := range 13 { // every 30 s for 6 min
		at := time.Duration(i) * 30 * time.Second
		ss = append(ss,
			ResourceSample{At: at, Slot: "n1", PID: 10, RSS: 20000 + int64(i)*100, FDs: 40, Goroutines: 100},
			ResourceSample{At: at, Slot: "n2", PID: 11, RSS: 20000, FDs: 40 + 2*i, Goroutines: 100 + 5*i})
	}
	// n2 did not answer /metrics once (no goroutines): that sample is left out.
	ss = append(ss, ResourceSample{At: 61 * time.Second, Slot: "n2", PID: 11, RSS: 1, FDs: 1, Goroutines: -1})
	gs := ResourceGrowth(ss, time.Minute)
	if len(gs) != 2 {
		t.Fatalf("%d growths: %v", len(gs), gs)
	}
	// n1: 20200 -> 21200 KiB from minute 1 to 6 (+4.95%).
	if g := gs[0]; g.Slot != "n1" || g.From.At != time.Minute || g.To.At != 6*time.Minute || g.RSS < 0.049 || g.RSS > 0.05 || g.FDs != 0 || g.Restarted {
		t.Fatalf("n1: %s", g)
	}
	// n2: descriptors 44 -> 64 (+45%), goroutines 110 -> 160 (+45%).
	if g := gs[1]; g.FDs < 0.45 || g.FDs > 0.46 || g.Goroutines < 0.45 || g.Goroutines > 0.46 {
		t.Fatalf("n2: %s", g)
	}
	if name, r := gs[1].Worst(); name != "descriptors" || r < 0.45 {
		t.Fatalf("n2's worst: %s %.3f", name, r)
	}
	if s := gs[1].String(); !strings.Contains(s, "descriptors 44->64 +45.5%") {
		t.Fatalf("%s", s)
	}
	// n2 leads from minute 5 on: its last sample is compared with the one nearest minute 1
	// among those it took leading (minute 5), not with a follower's.
	for i := range ss {
		if ss[i].Slot == "n2" && ss[i].At >= 5*time.Minute {
			ss[i].Leading = true
		}
	}
	if g := ResourceGrowth(ss, time.Minute)[1]; g.From.At != 5*time.Minute || g.RoleChanged || !strings.Contains(g.String(), "as the leader") {
		t.Fatalf("n2 leading: %s", g)
	}
	// n1 leads only in its last sample: compared across roles, and said so.
	for i := range ss {
		if ss[i].Slot == "n1" && ss[i].At == 6*time.Minute {
			ss[i].Leading = true
		}
	}
	if g := ResourceGrowth(ss, time.Minute)[0]; g.From.At != time.Minute || !g.RoleChanged || !strings.Contains(g.String(), "other role") {
		t.Fatalf("n1 leading last: %s", g)
	}
	// A restart between the two samples is reported.
	ss = append(ss, ResourceSample{At: 7 * time.Minute, Slot: "n1", PID: 99, RSS: 5000, FDs: 30, Goroutines: 50})
	if g := ResourceGrowth(ss, time.Minute)[0]; !g.Restarted || !strings.Contains(g.String(), "restarted: pid 10 before") {
		t.Fatalf("restart not reported: %s", g)
	}
}
