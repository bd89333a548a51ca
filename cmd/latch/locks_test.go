package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// locksLab is a server (single mode or a cluster) with the three secrets, and how to reach
// it: clients is the client port(s), http the --http the admin verbs go to.
type locksLab struct {
	sec     testSecrets
	clients string
	http    string
}

func (l locksLab) client(args ...string) []string {
	return append(args[:1:1], append([]string{"--servers", l.clients, "--secret-file", l.sec.client}, args[1:]...)...)
}

func (l locksLab) admin(signed bool, args ...string) []string {
	n := 1
	if args[0] == "locks" && len(args) > 1 && (args[1] == "show" || args[1] == "release") {
		n = 2
	}
	flags := []string{"--http", l.http}
	if signed {
		flags = append(flags, "--admin-secret-file", l.sec.admin)
	}
	return append(append(args[:n:n], flags...), args[n:]...)
}

// TestLocksInspectAndForceRelease, in single mode and through a follower of a cluster: a
// holder that took a long lease and a waiter behind it. `latch locks` lists the held keys
// with token, lease left and waiters; `locks show` shows one; without the admin credential
// every verb is refused. `locks release --token` of a token that does not hold is refused
// (exit 1); `locks release` frees the key through the log, prints the token, and the waiter
// is granted at once; the holder's own release then answers not held.
func TestLocksInspectAndForceRelease(t *testing.T) {
	clustertest.Slow(t, "starts latch servers and clients as processes")
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			lab := locksLab{sec: newTestSecrets(t)}
			if mode == "single" {
				p := startServer(t, nil, append([]string{"--listen", freePorts(t, 1)[0]}, lab.sec.serverArgs()...)...)
				lab.clients, lab.http = p.listen, p.http
			} else {
				tc := startTestCluster(t, 3, lab.sec.serverArgs()...)
				l := tc.leader()
				f := (l + 1) % 3
				lab.clients, lab.http = tc.procs[f].listen, tc.procs[f].http // everything through a follower
			}
			checkLocks(t, lab)
		})
	}
}

func checkLocks(t *testing.T, lab locksLab) {
	code, out := run(t, nil, lab.client("acquire", "--lease", "1h", "jobs/nightly")...)
	if code != 0 {
		t.Fatalf("acquire: exit %d\n%s", code, out)
	}
	tok := tokenOf(t, out)
	if code, out := run(t, nil, lab.client("acquire", "--lease", "30s", "jobs/other")...); code != 0 {
		t.Fatalf("acquire: exit %d\n%s", code, out)
	}
	waiter, wout, wdone := start(t, nil, lab.client("acquire", "--wait", "30s", "--lease", "30s", "jobs/nightly")...)
	_ = waiter
	clustertest.Eventually(t, 20*time.Second, "the waiter queued", func() bool {
		_, out := run(t, nil, lab.admin(true, "locks", "show", "--json", "jobs/nightly")...)
		var lk struct{ Waiters int }
		return json.Unmarshal([]byte(out), &lk) == nil && lk.Waiters == 1
	})

	for _, args := range [][]string{{"locks"}, {"locks", "show", "jobs/nightly"}, {"locks", "release", "jobs/nightly"}} {
		code, out := run(t, nil, lab.admin(false, args...)...)
		if code != exitUnavailable || !strings.Contains(out, "401") || !strings.Contains(out, "--admin-secret-file") {
			t.Fatalf("latch %v without the admin credential: exit %d\n%s", args, code, out)
		}
	}

	code, out = run(t, nil, lab.admin(true, "locks", "--prefix", "jobs/")...)
	if code != 0 {
		t.Fatalf("locks: exit %d\n%s", code, out)
	}
	row := regexp.MustCompile(`(?m)^jobs/nightly\s+` + strconv.FormatUint(tok, 10) + `\s+(\d+)m(\d+)\.?\d*s\s+1$`)
	m := row.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "jobs/other") {
		t.Fatalf("locks: want jobs/nightly with token %d, about 1h left, 1 waiter, and jobs/other:\n%s", tok, out)
	}
	if min, _ := strconv.Atoi(m[1]); min < 58 {
		t.Fatalf("lease left %sm: want close to the hour", m[1])
	}
	code, out = run(t, nil, lab.admin(true, "locks", "--limit", "1")...)
	if code != 0 || strings.Count(out, "jobs/") != 1 || !strings.Contains(out, "jobs/nightly") {
		t.Fatalf("locks --limit 1: exit %d, want the first key only:\n%s", code, out)
	}

	code, out = run(t, nil, lab.admin(true, "locks", "release", "--token", strconv.FormatUint(tok+100, 10), "jobs/nightly")...)
	if code != exitNotHeld || !strings.Contains(out, fmt.Sprint(tok)) {
		t.Fatalf("locks release of a token that does not hold: exit %d, want 1 naming holder %d\n%s", code, tok, out)
	}
	code, out = run(t, nil, lab.admin(true, "locks", "release", "jobs/nightly")...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("released jobs/nightly token %d", tok)) {
		t.Fatalf("locks release: exit %d\n%s", code, out)
	}
	if code := exitWithin(t, wdone, 20*time.Second, "the waiter, not granted after the forced release,", wout); code != 0 {
		t.Fatalf("the waiter: exit %d\n%s", code, wout.String())
	}
	if next := tokenOf(t, wout.String()); next <= tok {
		t.Fatalf("the waiter got token %d, not above %d", next, tok)
	}
	code, out = run(t, nil, lab.client("release", "jobs/nightly", strconv.FormatUint(tok, 10))...)
	if code != exitNotHeld {
		t.Fatalf("the old holder's release after the forced one: exit %d, want not held\n%s", code, out)
	}
	code, out = run(t, nil, lab.admin(true, "locks", "show", "jobs/missing")...)
	if code != 0 || !strings.Contains(out, "jobs/missing free") {
		t.Fatalf("locks show of a free key: exit %d\n%s", code, out)
	}
}

// tokenOf reads the "token N" line of latch acquire's output.
func tokenOf(t *testing.T, out string) uint64 {
	t.Helper()
	return matchedUint(t, `(?m)^token (\d+)$`, out)
}

// matchedUint is the number that the first group of the regular expression re matches in
// out; it fails the test when re does not match.
func matchedUint(t *testing.T, re, out string) uint64 {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no match for %s in:\n%s", re, out)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatalf("%s in %q: %v", re, out, err)
	}
	return n
}
