package member

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
)

// adminHandler is a member's admin HTTP handler over a (its membership and locks), with no
// credential to check: the tests call it without signing.
func adminHandler(a Admin) http.Handler {
	return admin.Handler(prometheus.NewRegistry(), func() error { return nil }, admin.Options{Cluster: a, Locks: a})
}

// call answers one admin request with h.
func call(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://127.0.0.1:7402"+path, strings.NewReader(body))
	if method == http.MethodPost {
		r.Header.Set("Content-Type", admin.ContentType(path))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// sameAnswer fails unless the follower's answer is the leader's: status and message.
func sameAnswer(t *testing.T, what string, leader, follower *httptest.ResponseRecorder, want int) {
	t.Helper()
	if leader.Code != want || follower.Code != leader.Code || !bytes.Equal(follower.Body.Bytes(), leader.Body.Bytes()) {
		t.Errorf("%s: the leader answers %d %s, the follower %d %s; want %d from both",
			what, leader.Code, leader.Body.String(), follower.Code, follower.Body.String(), want)
	}
}

// A change a follower forwards is answered with the status the leader gives it, not a 503 for
// every refusal: 409 for another node at the new member's address (which only the leader
// checks), 400 for a new member that would halt on the cluster's log (the follower here has
// not applied the cluster's feature switch, as one that lags behind it, or runs an older
// latch, has not, so only the leader refuses), and 503 for a change that was not applied
// (the new voter was removed while it caught up).
func TestForwardedChangeAnswersTheLeadersStatus(t *testing.T) {
	ms := startCluster(t, 2)
	leader, follower := leaderOf(t, ms)
	clustertest.Eventually(t, clustertest.Bound, "the feature switch on every member", func() bool { return leasesOn(ms) })
	atLeader, atFollower := adminHandler(leader.m.Admin()), adminHandler(follower.m.Admin())

	// 409: the leader's own peer address, given for another id.
	body := `{"id":"m9","addr":"` + leader.m.adv + `","nonvoter":true}`
	sameAnswer(t, "adding m9 at the leader's address", call(atLeader, http.MethodPost, "/v1/peers", body),
		call(atFollower, http.MethodPost, "/v1/peers", body), http.StatusConflict)

	// 400: a member that refuses protocol revision 2, which the cluster runs.
	old := startLone(t, "m8", true)
	lagging := membership{rp: &follower.m.rp, mux: follower.m.mux, id: follower.m.id, forward: true, locks: follower.m.node}
	body = `{"id":"m8","addr":"` + old.m.adv + `","nonvoter":true}`
	sameAnswer(t, "adding m8, which holds revision 2 back", call(atLeader, http.MethodPost, "/v1/peers", body),
		call(adminHandler(lagging), http.MethodPost, "/v1/peers", body), http.StatusBadRequest)

	// 503: m7 (nothing runs at its address) is removed while the leader waits for it to
	// catch up, so it is not made a voter.
	nowhere := clustertest.FreePorts(t, 1)[0]
	removedWhileCatchingUp := func(h http.Handler) *httptest.ResponseRecorder {
		t.Helper()
		answer := make(chan *httptest.ResponseRecorder, 1)
		go func() { answer <- call(h, http.MethodPost, "/v1/peers", `{"id":"m7","addr":"`+nowhere+`"}`) }()
		clustertest.Eventually(t, clustertest.Bound, "m7 a nonvoter", func() bool {
			for _, s := range leader.m.Raft().Servers() {
				if s.ID == "m7" {
					return s.Suffrage == "nonvoter"
				}
			}
			return false
		})
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
		defer cancel()
		if err := leader.m.Admin().RemoveMember(ctx, "m7"); err != nil {
			t.Fatalf("removing m7: %v", err)
		}
		return <-answer
	}
	sameAnswer(t, "adding m7, removed while it caught up", removedWhileCatchingUp(atLeader),
		removedWhileCatchingUp(atFollower), http.StatusServiceUnavailable)

	for _, s := range leader.m.Raft().Servers() {
		if s.ID != leader.m.ID() && s.ID != follower.m.ID() {
			t.Errorf("%s is in the configuration after the refused changes: %+v", s.ID, leader.m.Raft().Servers())
		}
	}
}
