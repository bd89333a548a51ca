package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
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
// is granted at once; the holder's own release then answers not held. In the cluster, the
// leader's audit trail names the client and the operator, and the follower they came through.
func TestLocksInspectAndForceRelease(t *testing.T) {
	clustertest.Slow(t, "starts latch servers and clients as processes")
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			lab := locksLab{sec: newTestSecrets(t)}
			if mode == "single" {
				p := startServer(t, nil, append([]string{"--listen", clustertest.FreePorts(t, 1)[0]}, lab.sec.serverArgs()...)...)
				lab.clients, lab.http = p.listen, p.http
				checkLocks(t, lab)
				return
			}
			tc := startTestCluster(t, 3, append(lab.sec.serverArgs(), "--audit")...)
			l := tc.leader()
			f := (l + 1) % 3
			lab.clients, lab.http = tc.procs[f].listen, tc.procs[f].http // everything through a follower
			checkLocks(t, lab)
			tc.expectAuditThrough(l, f, "jobs/nightly")
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

// rawCall sends one admin request to the node at httpAddr as a browser (or anyone) may:
// with host as its Host header and the origin and ctype headers when not empty. It returns
// the status code and the body.
func rawCall(t *testing.T, httpAddr, method, path, host, origin, ctype string, body []byte) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, "http://"+httpAddr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Host = host
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(r)
	if err != nil {
		t.Fatalf("%s %s to %s: %v", method, path, httpAddr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// logLine is the first JSON log line of p whose message is msg, or nil.
func (p *proc) logLine(msg string) map[string]any {
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["@message"] == msg {
			return l
		}
	}
	return nil
}

// heldOn checks that key is held on the node at listen (stillHeld, from a new session
// proving secret).
func heldOn(t *testing.T, listen string, secret []byte, key string) {
	t.Helper()
	c := wiretest.Dial(t, listen)
	defer c.Close()
	c.Hello(t, secret)
	stillHeld(t, c, key)
}

// TestSingleModeLockCallsNeedTheAdminCredential: a single-mode server with a client secret
// and no admin credential turns the calls that show key names or break locks off, says so
// at start in one line naming them and the flag that turns them on, and refuses them (the
// CLI verbs exit 69 saying why); nothing is released. With an admin credential they work
// with it, and are refused without it.
func TestSingleModeLockCallsNeedTheAdminCredential(t *testing.T) {
	t.Parallel()
	sec := newTestSecrets(t)
	const key = "tenant-9/private-key-name"
	off := startServer(t, nil, "--secret-file", sec.client)
	line := off.logLine("lock inspection and forced release are off")
	if line == nil || line["calls"] != admin.LockCalls || !strings.Contains(line["turn_on"].(string), "--admin-secret-file") {
		t.Fatalf("start log: %v; want one line naming %s and --admin-secret-file:\n%s", line, admin.LockCalls, off.stderr.String())
	}
	if n := strings.Count(off.stderr.String(), "lock inspection and forced release are off"); n != 1 {
		t.Fatalf("the warning is logged %d times, want once", n)
	}
	c := wiretest.Dial(t, off.listen)
	c.Hello(t, []byte(clientSecretValue))
	if r := c.Do(t, wiretest.Acquire(1, 0, 3600, key)); r.Op != wire.OpAcquire {
		t.Fatalf("acquire: %s", wiretest.Describe(r))
	}
	for _, e := range []struct{ method, path, ctype string }{
		{"GET", "/v1/locks", ""},
		{"GET", "/v1/locks/show?key=" + key, ""},
		{"POST", "/v1/locks/release", "application/json"},
	} {
		code, body := rawCall(t, off.http, e.method, e.path, off.http, "", e.ctype, []byte(`{"key":"`+key+`"}`))
		if code != http.StatusForbidden || !strings.Contains(body, "off on this node") || !strings.Contains(body, "--admin-secret-file") || strings.Contains(body, key) {
			t.Errorf("%s %s on a node with a client secret only: %d %s; want 403 naming --admin-secret-file", e.method, e.path, code, body)
		}
	}
	// The finding as reported: a text/plain POST from the host frees nothing.
	if code, body := rawCall(t, off.http, "POST", "/v1/locks/release", off.http, "", "text/plain", []byte(`{"key":"`+key+`"}`)); code < 400 {
		t.Errorf("text/plain POST /v1/locks/release: %d %s", code, body)
	}
	for _, args := range [][]string{{"locks", "--http", off.http}, {"locks", "show", "--http", off.http, key}, {"locks", "release", "--http", off.http, key}} {
		if code, out := run(t, nil, args...); code != exitUnavailable || !strings.Contains(out, "off on this node") {
			t.Errorf("latch %v against it: exit %d, %q; want 69 saying the calls are off", args, code, out)
		}
	}
	heldOn(t, off.listen, []byte(clientSecretValue), key)

	// With the admin credential: the calls work signed, and are refused unsigned.
	on := startServer(t, nil, "--secret-file", sec.client, "--admin-secret-file", sec.admin)
	if on.logLine("lock inspection and forced release are off") != nil {
		t.Fatalf("a node with the admin credential logs that the lock calls are off:\n%s", on.stderr.String())
	}
	c2 := wiretest.Dial(t, on.listen)
	c2.Hello(t, []byte(clientSecretValue))
	if r := c2.Do(t, wiretest.Acquire(1, 0, 3600, key)); r.Op != wire.OpAcquire {
		t.Fatalf("acquire: %s", wiretest.Describe(r))
	}
	if code, body := rawCall(t, on.http, "GET", "/v1/locks", on.http, "", "", nil); code != http.StatusUnauthorized || strings.Contains(body, key) {
		t.Errorf("unsigned GET /v1/locks: %d %s, want 401", code, body)
	}
	if code, body := rawCall(t, on.http, "POST", "/v1/locks/release", on.http, "", "application/json", []byte(`{"key":"`+key+`"}`)); code != http.StatusUnauthorized {
		t.Errorf("unsigned POST /v1/locks/release: %d %s, want 401", code, body)
	}
	heldOn(t, on.listen, []byte(clientSecretValue), key)
	if code, out := run(t, nil, "locks", "--http", on.http, "--admin-secret-file", sec.admin); code != 0 || !strings.Contains(out, key) {
		t.Fatalf("latch locks with the admin secret: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "locks", "release", "--http", on.http, "--admin-secret-file", sec.admin, key); code != 0 || !strings.Contains(out, "released "+key) {
		t.Fatalf("latch locks release with the admin secret: exit %d, %q", code, out)
	}
}

// Through a follower, `latch locks` lists 100,000 held keys (a forwarded page of
// cluster.MaxLocksPage keys is far longer than a request line may be), and show and a
// forced release reach the leader too.
func TestLocksThroughAFollowerAtAnySize(t *testing.T) {
	clustertest.Slow(t, "starts three processes and takes 100,000 locks")
	const keys = 100_000
	fc := startFixedCluster(t, 3)
	l, f := fc.leaderAndFollower()
	// Keys of the longest length, so that a page is as long as a page can be.
	long := strings.Repeat("k", wire.MaxKey-len("held/99/999/"))
	grantRounds(t, fc.conn(l), "held/"+long[:len(long)-3], keys/1000, 1000)

	code, out := fc.admin(f, "locks", "--json")
	if code != 0 {
		t.Fatalf("locks through n%d: exit %d\n%.2000s", f, code, out)
	}
	if n := strings.Count(out, "\n"); n != keys {
		t.Fatalf("locks through n%d listed %d lines, want %d:\n%.2000s", f, n, keys, out)
	}
	key := "held/" + long[:len(long)-3] + "/42/7"
	if code, out := fc.admin(f, "locks show", key); code != 0 || !strings.Contains(out, "held") {
		t.Fatalf("locks show through n%d: exit %d\n%s", f, code, out)
	}
	if code, out := fc.admin(f, "locks release", key); code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("locks release through n%d: exit %d\n%s", f, code, out)
	}
	if code, out := fc.admin(f, "locks", "--json", "--prefix", key); code != 0 || strings.Contains(out, `"key":"`+key+`"`) {
		t.Fatalf("the released key is still listed: exit %d\n%.2000s", code, out)
	}
}
