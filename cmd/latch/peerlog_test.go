package main

import (
	"strings"
	"testing"
	"time"
)

// Issue 13 item 7: a down peer cost the leader's log about two ERROR lines a second, for as
// long as it was down. Now: one line when it stops answering, then nothing until the
// minute's summary.
func TestDownPeerLoggedOncePerStateChange(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	l := tc.leader()
	f := (l + 1) % 3
	before := len(tc.procs[l].stderr.String())
	tc.procs[f].cmd.Process.Kill()
	<-tc.procs[f].exited
	time.Sleep(8 * time.Second) // some 40 heartbeat failures at raft's backoff

	var warnings []string
	for _, line := range strings.Split(tc.procs[l].stderr.String()[before:], "\n") {
		if strings.Contains(line, `"@level":"error"`) || strings.Contains(line, `"@level":"warn"`) {
			warnings = append(warnings, line)
		}
	}
	down := 0
	for _, w := range warnings {
		if strings.Contains(w, "cannot reach peer") {
			down++
		}
		if strings.Contains(w, `"@message":"failed to heartbeat`) || strings.Contains(w, `"@message":"failed to appendEntries`) {
			t.Errorf("a per-attempt failure reached the log: %s", w)
		}
	}
	if down != 1 || len(warnings) > 5 {
		t.Fatalf("%d 'cannot reach peer' lines (want 1) and %d warnings in all over 8 s with a peer down:\n%s",
			down, len(warnings), strings.Join(warnings, "\n"))
	}
}
