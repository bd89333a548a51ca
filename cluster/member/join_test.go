package member

import (
	"errors"
	"testing"
	"time"
)

// The join loop's decisions, round by round. The process tests run the loop for real
// (TestClusterMembershipThroughTheCLI, the deploy process tests); this pins each rule,
// including the two races a review found: a node removed before it saw itself added, and a
// node restarted while its configuration was older than its addition.
func TestJoinDecisions(t *testing.T) {
	listedAs := func(s string) func() (string, error) { return func() (string, error) { return s, nil } }
	unasked := func() (string, error) {
		t.Helper()
		t.Fatal("the cluster was asked although the node knew enough")
		return "", nil
	}
	down := func() (string, error) { return "", errors.New("connection refused") }
	type round struct {
		own       string
		hasConfig bool
		listed    func() (string, error)
		ready     bool
		want      int
	}
	for _, c := range []struct {
		name   string
		rounds []round
	}{
		{"a new node: asks once, waits for the entry, catches up, asks for a vote, joins", []round{
			{"", false, listedAs(""), false, joinAsk},
			{"", false, unasked, false, joinWait}, // asked: never asks again before it sees itself
			{"nonvoter", true, unasked, false, joinCatchingUp},
			{"nonvoter", true, unasked, false, joinWait},
			{"nonvoter", true, unasked, true, joinPromote},
			{"voter", true, unasked, true, joinJoined},
		}},
		{"removed after it saw itself, before it became a voter", []round{
			{"", false, listedAs(""), false, joinAsk},
			{"nonvoter", true, unasked, false, joinCatchingUp},
			{"", true, unasked, true, joinRemoved},
		}},
		{"restarted while catching up: its own configuration predates its addition", []round{
			{"", true, listedAs("nonvoter"), false, joinListed},
			{"", true, unasked, false, joinWait},
			{"nonvoter", true, unasked, false, joinCatchingUp},
			{"nonvoter", true, unasked, true, joinPromote},
			{"nonvoter", true, unasked, true, joinWait}, // the vote was granted; its entry is on the way
		}},
		{"restarted after it was removed", []round{
			{"", true, listedAs(""), true, joinRemoved},
		}},
		{"a voter already", []round{
			{"voter", true, unasked, true, joinMember},
		}},
		{"the cluster cannot be asked: retry, never conclude", []round{
			{"", true, down, false, joinFailed},
			{"", true, listedAs(""), false, joinRemoved},
		}},
	} {
		var st joinState
		for i, r := range c.rounds {
			if got := st.next(r.own, r.hasConfig, r.listed, r.ready); got != r.want {
				t.Errorf("%s: round %d (own %q): action %d, want %d", c.name, i+1, r.own, got, r.want)
				break
			}
			switch r.want { // the loop records a request that went through
			case joinAsk:
				st.asked = true
			case joinPromote:
				st.asked, st.promoted = true, time.Now()
			}
		}
	}
}
