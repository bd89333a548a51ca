package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// checkLeaders finds terms that more than one node claimed to lead (LeaderView.Claims):
// raft elects at most one leader per term, so two claims of one term by different nodes are
// two leaders in one term (a vote cast twice, say by a node that lost its disk and voted
// again in the term it had voted in).
//
// Only a node's claim about itself counts. A follower's view pairs its term with the leader
// it names, and a status reads those one after the other with a wait on raft's main loop
// between them (raftnode.Node.Status), so a follower that moves to the next term in that
// wait names the new leader beside the old term. A claim cannot be skewed so: the node names
// itself at the end of the read only if it still leads, and to lead a later term it must
// first have stepped down and won an election, which takes longer than a status read. The
// followers' views of a term are listed in the violation, as evidence.
func checkLeaders(views []LeaderView) []Violation {
	type claim struct {
		node string
		at   time.Duration // the first claim
	}
	claims := map[uint64][]claim{}
	for _, v := range views {
		if !v.Claims() {
			continue
		}
		cs := claims[v.Term]
		if i := slices.IndexFunc(cs, func(c claim) bool { return c.node == v.Node }); i >= 0 {
			cs[i].at = min(cs[i].at, v.At)
			continue
		}
		claims[v.Term] = append(cs, claim{v.Node, v.At})
	}
	terms := make([]uint64, 0, len(claims))
	for t, cs := range claims {
		if len(cs) > 1 {
			terms = append(terms, t)
		}
	}
	slices.Sort(terms)
	var out []Violation
	for _, t := range terms {
		cs := claims[t]
		sort.Slice(cs, func(i, j int) bool { return cs[i].at < cs[j].at })
		var parts []string
		for _, c := range cs {
			parts = append(parts, fmt.Sprintf("%s (first claimed at %s)", c.node, ms(c.at)))
		}
		out = append(out, Violation{VTwoLeaders, fmt.Sprintf("term %d led by %s; what the nodes said in term %d: %s",
			t, strings.Join(parts, " and "), t, viewsOfTerm(views, t))})
	}
	return out
}

// viewsOfTerm lists, for each node, the leaders it named in term t and when first.
func viewsOfTerm(views []LeaderView, t uint64) string {
	type seen struct {
		node, leader string
	}
	first := map[seen]time.Duration{}
	var order []seen
	for _, v := range views {
		if v.Term != t {
			continue
		}
		k := seen{v.Node, v.Leader}
		if at, ok := first[k]; !ok {
			order = append(order, k)
			first[k] = v.At
		} else if v.At < at {
			first[k] = v.At
		}
	}
	parts := make([]string, len(order))
	for i, k := range order {
		leader := k.leader
		if leader == "" {
			leader = "no leader"
		}
		parts[i] = fmt.Sprintf("%s named %s at %s", k.node, leader, ms(first[k]))
	}
	return strings.Join(parts, ", ")
}

// Terms sums up the leader views: how many terms had a claimed leader, and how many views
// were recorded.
func Terms(views []LeaderView) (led, recorded int) {
	terms := map[uint64]bool{}
	for _, v := range views {
		if v.Claims() {
			terms[v.Term] = true
		}
	}
	return len(terms), len(views)
}

// Growth is how much one node's process grew in a soak run, from the sample nearest a
// moment (From) to its last sample (To). The ratios are (To - From) / From.
type Growth struct {
	Slot                 string
	From, To             ResourceSample
	RSS, FDs, Goroutines float64
	// Restarted: From and To are of different processes (the node was restarted between),
	// so the figures compare nothing. RoleChanged: no sample in the role of the last (leader
	// or follower) came before it, so From is of the other role.
	Restarted, RoleChanged bool
}

// ResourceGrowth compares each node's sample nearest at with its last, among the samples
// that hold every figure (a node that did not answer /metrics gives none) and, where there
// are any before the last, were taken in the same role (leading or not) as the last; a node
// without two such samples is left out. The result is sorted by slot.
func ResourceGrowth(samples []ResourceSample, at time.Duration) []Growth {
	bySlot := map[string][]ResourceSample{}
	for _, s := range samples {
		if s.Goroutines >= 0 && s.RSS > 0 && s.FDs > 0 {
			bySlot[s.Slot] = append(bySlot[s.Slot], s)
		}
	}
	var out []Growth
	for slot, ss := range bySlot {
		sort.Slice(ss, func(i, j int) bool { return ss[i].At < ss[j].At })
		last := ss[len(ss)-1]
		var from *ResourceSample
		roleChanged := false
		for _, sameRole := range []bool{true, false} {
			for i := range ss[:len(ss)-1] {
				s := &ss[i]
				if sameRole && s.Leading != last.Leading {
					continue
				}
				if from == nil || absDur(s.At-at) < absDur(from.At-at) {
					from = s
				}
			}
			if from != nil {
				break
			}
			roleChanged = true
		}
		if from == nil {
			continue
		}
		out = append(out, Growth{Slot: slot, From: *from, To: last, Restarted: from.PID != last.PID, RoleChanged: roleChanged,
			RSS:        ratio(float64(from.RSS), float64(last.RSS)),
			FDs:        ratio(float64(from.FDs), float64(last.FDs)),
			Goroutines: ratio(float64(from.Goroutines), float64(last.Goroutines))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}

// Worst is the largest of g's three ratios and its name.
func (g Growth) Worst() (string, float64) {
	name, r := "rss", g.RSS
	if g.FDs > r {
		name, r = "descriptors", g.FDs
	}
	if g.Goroutines > r {
		name, r = "goroutines", g.Goroutines
	}
	return name, r
}

func (g Growth) String() string {
	pct := func(r float64) string { return fmt.Sprintf("%+.1f%%", 100*r) }
	s := fmt.Sprintf("%s (pid %d) %s..%s: rss %d->%d KiB %s, descriptors %d->%d %s, goroutines %d->%d %s",
		g.Slot, g.To.PID, ms(g.From.At), ms(g.To.At), g.From.RSS, g.To.RSS, pct(g.RSS), g.From.FDs, g.To.FDs, pct(g.FDs),
		g.From.Goroutines, g.To.Goroutines, pct(g.Goroutines))
	if g.From.RSSAnon > 0 || g.To.RSSAnon > 0 {
		s += fmt.Sprintf(" (anonymous %d->%d KiB, file-backed %d->%d KiB)", g.From.RSSAnon, g.To.RSSAnon, g.From.RSSFile, g.To.RSSFile)
	}
	role := "a follower"
	if g.To.Leading {
		role = "the leader"
	}
	s += ", as " + role
	if g.RoleChanged {
		s += " (then of the other role: none earlier in this one)"
	}
	if g.Restarted {
		s += fmt.Sprintf(" (restarted: pid %d before)", g.From.PID)
	}
	return s
}

func ratio(from, to float64) float64 {
	if from == 0 {
		return 0
	}
	return (to - from) / from
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
