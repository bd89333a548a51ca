package main

import (
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// TestAcquireRidesThroughLeaderKill starts `latch acquire --wait 10s` through each survivor
// and through all servers listed, the moment the leader is killed: each asks again through
// the election and is granted once a new leader exists.
func TestAcquireRidesThroughLeaderKill(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	tc := startTestCluster(t, 3)
	l := tc.leader()
	var all []string
	for _, p := range tc.procs {
		all = append(all, p.listen)
	}
	tc.procs[l].kill(t) // its sockets are closed: the survivors' links to it are broken

	type attempt struct {
		via  string
		out  *clustertest.Buffer
		done <-chan error
	}
	var as []attempt
	for i, p := range tc.procs {
		if i != l {
			_, out, done := start(t, nil, "acquire", "--servers="+p.listen, "--wait", "10s", "--lease", "60s", "ride/"+p.listen)
			as = append(as, attempt{p.listen, out, done})
		}
	}
	_, out, done := start(t, nil, "acquire", "--servers="+strings.Join(all, ","), "--wait", "10s", "--lease", "60s", "ride/all")
	as = append(as, attempt{"all servers", out, done})
	started := time.Now()
	for _, a := range as {
		code := exitWithin(t, a.done, 20*time.Second, "acquire through "+a.via+" (its wait is 10 s)", a.out)
		if code != 0 || !strings.HasPrefix(a.out.String(), "token ") {
			t.Fatalf("acquire through %s during the election: exit %d after %v:\n%s", a.via, code, time.Since(started), a.out.String())
		}
	}
	t.Logf("all granted %v after the kill", time.Since(started).Round(time.Millisecond))
	tc.leader(l) // and the cluster has a leader again
}

// TestClientVerbsSayUnavailable: when no server answers, every client verb exits 69 and
// names the address; a port that speaks something other than latch is 69 too, never 75.
func TestClientVerbsSayUnavailable(t *testing.T) {
	t.Parallel()
	dead, webAddr := clustertest.DeadAddr(t), clustertest.NonLatchAddr(t)

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"acquire", "--servers=" + dead, "--wait", "2s", "k"}, []string{"no server answered", dead, "connection refused"}},
		{[]string{"acquire", "--servers=" + dead, "k"}, []string{"no server answered", dead}},
		{[]string{"run", "--servers=" + dead, "--wait", "1s", "k", "--", "true"}, []string{"no server answered", dead}},
		{[]string{"release", "--servers=" + dead, "k", "5"}, []string{"no server answered", dead}},
		{[]string{"ping", "--servers=" + dead}, []string{"no server answered", dead}},
		{[]string{"bench", "--servers=" + dead, "--duration", "1s"}, []string{"no server answered", dead}},
		{[]string{"acquire", "--servers=" + webAddr, "--wait", "1s", "k"}, []string{"not a latch server", webAddr}},
	} {
		code, out := run(t, nil, tc.args...)
		if code != exitUnavailable {
			t.Errorf("latch %v: exit %d, want %d:\n%s", tc.args, code, exitUnavailable, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("latch %v: output does not say %q:\n%s", tc.args, w, out)
			}
		}
	}
}
