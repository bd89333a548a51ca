package fencetest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest/procstat"
)

// racePausedHolder runs one round of the end-to-end race on s (see e2e_test.go); env tells
// the writers which database to open.
func racePausedHolder(t *testing.T, addr string, s *store, env []string) {
	key := "jobs/report-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	first := runHolder(t, "first holder", addr, key, append(env, pauseEnv+"=1"))
	var ready writerReady
	first.await(t, readyFile, &ready)
	stopped := stopTree(first.cmd.Process.Pid)
	deadline, err := time.Parse(time.RFC3339Nano, ready.Deadline)
	if err != nil {
		t.Fatalf("LATCH_DEADLINE %q: %v", ready.Deadline, err)
	}
	// latch run sends SIGTERM --kill-grace (500 ms) before the deadline: the pause must
	// come before that, or the round would not test what it claims.
	if late := time.Until(deadline.Add(-500 * time.Millisecond)); late <= 0 {
		t.Fatalf("the first holder was paused %v after latch run's SIGTERM time; the machine is too loaded for this round", -late)
	}
	if procstat.State(ready.PID) != 'T' {
		t.Fatalf("the first writer (pid %d) is in state %q after SIGSTOP, want T", ready.PID, procstat.State(ready.PID))
	}

	// While it is paused, its lease ends and the second holder takes the lock and writes.
	// The second one asks once the lease is over (its deadline on the server is a little
	// after LATCH_DEADLINE; a second covers it): a waiter queued behind the lease would be
	// granted only at the server's next sweep, with less than its budget left.
	time.Sleep(time.Until(deadline.Add(time.Second)))
	second := runHolder(t, "second holder", addr, key, env)
	var res2 writerResult
	second.await(t, resultFile, &res2)
	second.wait(t)
	if res2.Err != "" || second.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("second holder: %q, exit %v", res2.Err, second.cmd.ProcessState)
	}
	if res2.Token <= ready.Token {
		t.Fatalf("second holder's token %d is not above the first's %d", res2.Token, ready.Token)
	}

	// The first writer resumes (before its latch run, which would kill it at once) and
	// writes with its old token.
	if err := os.WriteFile(filepath.Join(first.dir, goFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(ready.PID, syscall.SIGCONT)
	var res1 writerResult
	first.await(t, resultFile, &res1)
	for _, pid := range stopped {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	first.wait(t)

	if res1.Err != "" || res1.Late != "stale" || res1.Seen != res2.Token {
		t.Fatalf("the late write of token %d: %+v, want refused as stale with token %d seen", ready.Token, res1, res2.Token)
	}
	body, last, writes := s.report(t)
	if body != writerBody(res2.Token, false) || uint64(last) != res2.Token || writes != 2 {
		t.Fatalf("report %q by %d after %d writes, want the second holder's (token %d) after 2", body, last, writes, res2.Token)
	}
	s.mustMark(t, "reports", res2.Token)
	t.Logf("token %d paused past its lease; token %d wrote; the late write of %d was refused (first latch run: %v)",
		ready.Token, res2.Token, ready.Token, first.cmd.ProcessState)
}

// stopTree stops root and every process below it with SIGSTOP, root first (a stopped
// process forks no more), and returns them.
func stopTree(root int) []int {
	stopped := map[int]bool{}
	var order []int
	for {
		added := false
		for _, pid := range procstat.Tree(root) {
			if !stopped[pid] {
				syscall.Kill(pid, syscall.SIGSTOP)
				stopped[pid], added = true, true
				order = append(order, pid)
			}
		}
		if !added {
			break
		}
	}
	for _, pid := range order { // SIGSTOP is asynchronous: wait until each one is stopped
		for i := 0; i < 500 && procstat.State(pid) != 'T' && procstat.State(pid) != 0; i++ {
			time.Sleep(2 * time.Millisecond)
		}
	}
	return order
}
