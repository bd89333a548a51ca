package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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

// fixedCluster is a cluster whose nodes all get the same flags except their id, data dir and
// addresses, which are fixed (so a restarted or wiped node comes back where it was), like
// pods of a StatefulSet. --join points at node 0's --http.
type fixedCluster struct {
	t                  *testing.T
	raft, http, listen []string
	dir                string
	sec                testSecrets
	procs              []*proc
}

func newFixedCluster(t *testing.T, n int) *fixedCluster {
	t.Helper()
	ports := clustertest.FreePorts(t, 3*n)
	fc := &fixedCluster{t: t, raft: ports[:n], http: ports[n : 2*n], listen: ports[2*n:], dir: t.TempDir(), sec: newTestSecrets(t)}
	fc.procs = make([]*proc, n)
	return fc
}

// startFixedCluster is newFixedCluster with all n nodes started and serving.
func startFixedCluster(t *testing.T, n int) *fixedCluster {
	t.Helper()
	fc := newFixedCluster(t, n)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	fc.start(all...)
	return fc
}

func (fc *fixedCluster) args(i int) []string {
	var ic []string
	for j, a := range fc.raft {
		ic = append(ic, fmt.Sprintf("n%d=%s", j, a))
	}
	return append([]string{"--mode", "cluster", "--id", fmt.Sprintf("n%d", i), "--data-dir", fc.dataDir(i),
		"--raft-addr", fc.raft[i], "--http", fc.http[i], "--listen", fc.listen[i],
		"--initial-cluster", strings.Join(ic, ","), "--join", fc.http[0]}, fc.sec.serverArgs()...)
}

func (fc *fixedCluster) dataDir(i int) string { return filepath.Join(fc.dir, fmt.Sprintf("n%d", i)) }

// start spawns the nodes given (all at once: initial members wait for each other) and waits
// until each serves.
func (fc *fixedCluster) start(nodes ...int) {
	fc.t.Helper()
	for _, i := range nodes {
		fc.procs[i] = spawnServer(fc.t, nil, fc.args(i)...)
	}
	for _, i := range nodes {
		fc.procs[i].awaitServing(fc.t)
	}
}

// leader waits until one node leads and every running node is ready; it returns its index.
func (fc *fixedCluster) leader() int {
	tc := &testCluster{t: fc.t, procs: fc.procs}
	return tc.leader()
}

// leaderAndFollower waits for the leader as leader does and returns its index and that of
// the node after it, a follower.
func (fc *fixedCluster) leaderAndFollower() (int, int) {
	fc.t.Helper()
	l := fc.leader()
	return l, (l + 1) % len(fc.procs)
}

func (fc *fixedCluster) conn(i int) *wiretest.Conn {
	c := wiretest.Dial(fc.t, fc.listen[i])
	c.Hello(fc.t, []byte(clientSecretValue))
	return c
}

// admin runs the admin verb (e.g. "snapshot save") against node i, signed, with args after
// the node's flags (urfave/cli parses flags only before arguments).
func (fc *fixedCluster) admin(i int, verb string, args ...string) (int, string) {
	fc.t.Helper()
	full := append(strings.Fields(verb), "--http", fc.http[i], "--admin-secret-file", fc.sec.admin)
	return run(fc.t, nil, append(full, args...)...)
}

func (fc *fixedCluster) voters(i int) int {
	_, out := run(fc.t, nil, "peers", "list", "--http", fc.http[i])
	return strings.Count(out, "voter")
}

func (fc *fixedCluster) waitFor(what string, cond func() bool) {
	fc.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			fc.t.Fatalf("%s: not within 45 s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopAll stops every running node: SIGTERM, exit 0.
func (fc *fixedCluster) stopAll() {
	fc.t.Helper()
	for i, p := range fc.procs {
		if p == nil {
			continue
		}
		p.stop(fc.t, fmt.Sprintf("n%d", i))
		fc.procs[i] = nil
	}
}

// grantAll acquires keys through node i and returns their tokens, rising.
func grantAll(t *testing.T, c *wiretest.Conn, keys ...string) []uint64 {
	t.Helper()
	var toks []uint64
	for j, k := range keys {
		r := c.Do(t, wiretest.Acquire(uint64(100+j), 0, 3600, k))
		if r.Op != wire.OpAcquire {
			t.Fatalf("acquire %s: %s", k, wiretest.Describe(r))
		}
		if len(toks) > 0 && r.Token <= toks[len(toks)-1] {
			t.Fatalf("token %d after %d", r.Token, toks[len(toks)-1])
		}
		toks = append(toks, r.Token)
	}
	return toks
}

// stillHeld checks that each key is held: an immediate acquire times out.
func stillHeld(t *testing.T, c *wiretest.Conn, keys ...string) {
	t.Helper()
	for j, k := range keys {
		if r := c.Do(t, wiretest.Acquire(uint64(500+j), 0, 30, k)); r.Op != wire.OpTimeout {
			t.Fatalf("%s should still be held: %s", k, wiretest.Describe(r))
		}
	}
}

// lastTokenIn reads the "last token N" of latch status's or snapshot's output.
func lastTokenIn(t *testing.T, out string) uint64 {
	t.Helper()
	return matchedUint(t, `last token\s+(\d+)`, out)
}

// Backup through a follower, then restore into a fresh cluster through a follower: the
// locks come back, the counter is above --token-floor, and what the CLI refuses it refuses
// before sending anything.
func TestSnapshotSaveRestoreThroughTheCLI(t *testing.T) {
	clustertest.Slow(t, "starts six processes")
	src := startFixedCluster(t, 3)
	l, f := src.leaderAndFollower()
	c := src.conn(l)
	keys := []string{"backup/a", "backup/b", "backup/c"}
	toks := grantAll(t, c, keys...)

	file := filepath.Join(t.TempDir(), "latch.snap")
	if code, out := run(t, nil, "snapshot", "save", "--http", src.http[f], file); code == 0 || !strings.Contains(out, "--admin-secret-file") {
		t.Fatalf("unsigned snapshot save: exit %d, %q", code, out)
	}
	code, out := src.admin(f, "snapshot save", file)
	if code != 0 || !strings.Contains(out, "3 held keys") || lastTokenIn(t, out) != toks[2] {
		t.Fatalf("snapshot save: exit %d, %q", code, out)
	}
	if _, err := os.Stat(file + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
	// The trap: tokens issued after the backup. The operator knows the highest one.
	after := grantAll(t, c, "after/backup")[0]
	c.Close()

	dst := startFixedCluster(t, 3)
	dl, df := dst.leaderAndFollower()
	if code, out := dst.admin(df, "snapshot restore", file); code == 0 || !strings.Contains(out, "token-floor") {
		t.Fatalf("restore without --token-floor: exit %d, %q", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	data, _ := os.ReadFile(file)
	data[len(data)/2] ^= 0x40
	os.WriteFile(bad, data, 0o600)
	if code, out := dst.admin(df, "snapshot restore", "--token-floor", "0", bad); code != exitUsage || !strings.Contains(out, "corrupt") {
		t.Fatalf("restore of a corrupt file: exit %d, %q", code, out)
	}
	// The server refuses on its own too (a client other than the CLI).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	secret := []byte(adminSecretValue)
	good, _ := os.ReadFile(file)
	for _, c := range []struct {
		query  string
		body   []byte
		secret []byte
		want   string
	}{
		{"token_floor=5", good, nil, "401"},
		{"token_floor=5", good, []byte(strings.Repeat("x", 40)), "401"},
		{"token_floor=5", good, []byte(clientSecretValue), "401"},
		{"token_floor=5", good, []byte(peerSecretValue), "403"},
		{"token_floor=-1", good, secret, "400"},
		{"", good, secret, "400"},
		{"token_floor=9223372036854775808", good, secret, "400"},
		{"token_floor=5", data, secret, "400"},
		{"token_floor=5", []byte("not a backup"), secret, "400"},
	} {
		_, _, err := admin.NewRemote(dst.http[df], nil).Do(ctx, http.MethodPost, "/v1/restore?"+c.query, c.body, c.secret, 1<<20)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("POST /v1/restore?%s: %v, want %s", c.query, err, c.want)
		}
	}
	// An unsigned restore announcing a 900 MB body is refused from its headers alone: the
	// server answers before a byte of the body is sent (it never buffers it).
	func() {
		nc, err := net.DialTimeout("tcp", dst.http[df], 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "POST /v1/restore?token_floor=5 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: 900000000\r\n\r\n", dst.http[df])
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unsigned restore with no body sent: %v %v, want 401 at once", resp, err)
		}
	}()
	// A waiter queued on the leader when the restore begins is answered E unavailable (the
	// leader stops deciding; the client may retry), and its connection stays usable.
	holder, waiter := dst.conn(dl), dst.conn(dl)
	if r := holder.Do(t, wiretest.Acquire(1, 0, 3600, "restore/contended")); r.Op != wire.OpAcquire {
		t.Fatalf("holder: %s", wiretest.Describe(r))
	}
	waiter.Send(t, wiretest.Acquire(2, 120, 30, "restore/contended"))
	dst.waitFor("the waiter is queued on the leader", func() bool {
		_, body := httpGetQuiet(dst.http[dl] + "/metrics")
		return strings.Contains(body, "\nlatch_waiters 1\n")
	})
	code, out = dst.admin(df, "snapshot restore", "--token-floor", strconv.FormatUint(after, 10), file)
	if r := waiter.NextWithin(t, 30*time.Second); r.Op != wire.OpError || r.Owner != 2 || r.Reason != wire.ReasonUnavailable {
		t.Fatalf("a waiter during the restore got %s, want E unavailable for owner 2", wiretest.Describe(r))
	}
	if code != 0 || lastTokenIn(t, out) != toks[2] || !strings.Contains(out, fmt.Sprintf("last token %d (the largest", after)) {
		t.Fatalf("snapshot restore: exit %d, %q", code, out)
	}
	dl = dst.leader()
	for i := range 3 { // every node serves the restored state (followers forward)
		dc := dst.conn(i)
		stillHeld(t, dc, keys...)
		if tok := grantAll(t, dc, fmt.Sprintf("new/%d", i))[0]; tok <= after {
			t.Fatalf("token %d after the restore, not above the floor %d", tok, after)
		}
		dc.Close()
	}
	// The waiter's connection still works: the key it waited for is free in the restored
	// state (the backup never held it), so a retry gets it at once.
	if r := waiter.Do(t, wiretest.Acquire(3, 0, 30, "restore/contended")); r.Op != wire.OpAcquire || r.Token <= after {
		t.Fatalf("retry after the restore: %s", wiretest.Describe(r))
	}
	// The backup's tokens still release their locks.
	dc := dst.conn(dl)
	dc.Raw(t, wiretest.Release(7, toks[0], keys[0]))
	dc.ExpectOp(t, wire.OpRelease, 7)
	code, out = dst.admin(dl, "status")
	if code != 0 || lastTokenIn(t, out) <= after {
		t.Fatalf("latch status after the restore: exit %d, %q", code, out)
	}
}

// Lost quorum: two of three nodes die for good. The survivor is recovered offline with
// latch recover, the others are wiped, and all three restart with their usual arguments:
// the wiped ones do not bootstrap a rival cluster, they join the recovered one; the locks
// and a raised counter survive.
func TestRecoverLostQuorumThroughTheCLI(t *testing.T) {
	clustertest.Slow(t, "starts six processes")
	fc := startFixedCluster(t, 3)
	c := fc.conn(fc.leader())
	keys := []string{"quorum/a", "quorum/b"}
	toks := grantAll(t, c, keys...)
	c.Close()
	fc.waitFor("every node applied the grants", func() bool {
		for i := range 3 {
			if _, body := httpGetQuiet(fc.http[i] + "/metrics"); !strings.Contains(body, fmt.Sprintf("\nlatch_last_token %d\n", toks[1])) {
				return false
			}
		}
		return true
	})

	for _, i := range []int{1, 2} { // the majority is lost
		fc.procs[i].cmd.Process.Kill()
		fc.procs[i].wait(t, 10*time.Second)
		fc.procs[i] = nil
	}
	fc.waitFor("node 0 sees no leader", func() bool { code, _ := httpGetQuiet(fc.http[0] + "/readyz"); return code != 200 })
	fc.stopAll()

	code, out := run(t, nil, "recover", "--data-dir", fc.dataDir(0), "--dry-run")
	if code != 0 || lastTokenIn(t, out) != toks[1] || !strings.Contains(out, "2 held keys") {
		t.Fatalf("recover --dry-run: exit %d, %q", code, out)
	}
	if code, out := run(t, nil, "recover", "--data-dir", fc.dataDir(0), "--id", "n0", "--advertise", fc.raft[0]); code != exitUsage {
		t.Fatalf("recover without --token-floor: exit %d, %q", code, out)
	}
	floor := toks[1] + 1000
	code, out = run(t, nil, "recover", "--data-dir", fc.dataDir(0), "--id", "n0", "--advertise", fc.raft[0],
		"--token-floor", strconv.FormatUint(floor, 10))
	if code != 0 || !strings.Contains(out, "after: last index") || !strings.Contains(out, fmt.Sprintf("last token %d, 2 held keys, members: n0=", floor)) {
		t.Fatalf("recover: exit %d, %q", code, out)
	}
	for _, i := range []int{1, 2} {
		if err := os.RemoveAll(fc.dataDir(i)); err != nil {
			t.Fatal(err)
		}
	}

	fc.start(0, 1, 2) // the same arguments as before
	fc.waitFor("three voters again", func() bool { return fc.voters(0) == 3 })
	fc.leader()
	for i := range 3 {
		c := fc.conn(i)
		stillHeld(t, c, keys...)
		if tok := grantAll(t, c, fmt.Sprintf("recovered/%d", i))[0]; tok <= floor {
			t.Fatalf("token %d after recovery, not above the floor %d", tok, floor)
		}
		c.Close()
	}
	for i := 1; i < 3; i++ {
		if strings.Contains(fc.procs[i].stderr.String(), "bootstrapping a new cluster") {
			t.Fatalf("wiped n%d bootstrapped a rival cluster:\n%s", i, fc.procs[i].stderr.String())
		}
	}
}

// An initial member started alone waits for the others before bootstrapping, alive but not
// ready, and says what it waits for.
func TestInitialMemberWaitsForTheOthers(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	fc := newFixedCluster(t, 3)
	fc.procs[0] = spawnServer(t, nil, fc.args(0)...)
	fc.waitFor("n0 explains why it is not ready", func() bool {
		code, body := httpGetQuiet(fc.http[0] + "/readyz")
		return code == 503 && strings.Contains(body, "waiting for initial members") && strings.Contains(body, "n2")
	})
	if code, _ := httpGetQuiet(fc.http[0] + "/healthz"); code != 200 {
		t.Fatalf("/healthz while waiting: %d, want 200", code)
	}
	// Its HTTP server has the serving node's bounds meanwhile: idle connections past the cap
	// (at most 256) are closed, oldest first, and a probe still gets in.
	idle := make([]net.Conn, 400)
	for i := range idle {
		c, err := net.Dial("tcp", strings.TrimPrefix(fc.http[0], "http://"))
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		defer c.Close()
		idle[i] = c
	}
	if code, body := httpGetQuiet(fc.http[0] + "/readyz"); code != 503 || !strings.Contains(body, "waiting for initial members") {
		t.Fatalf("/readyz past 400 idle connections: %d %q", code, body)
	}
	closed := 0
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed < len(idle)-256 {
		t.Fatalf("%d of %d idle connections closed while the node waits; the cap is at most 256", closed, len(idle))
	}
	fc.start(1, 2)
	fc.procs[0].awaitServing(t)
	l := fc.leader()
	c := fc.conn(l)
	grantAll(t, c, "after/wait")
	if n := fc.voters(l); n != 3 {
		t.Fatalf("%d voters, want 3", n)
	}

	// Cluster-mode metrics: raft progress and forwarding, on a follower that forwarded.
	f := (l + 1) % 3
	fcn := fc.conn(f)
	grantAll(t, fcn, "through/follower")
	_, body := httpGetQuiet(fc.http[f] + "/metrics")
	for _, re := range []string{`\nlatch_raft_voters 3\n`, `\nlatch_raft_term [1-9]\d*\n`, `\nlatch_raft_commit_index [1-9]\d*\n`,
		`\nlatch_raft_applied_index [1-9]\d*\n`, `\nlatch_forward_connections 1\n`, `\nlatch_forward_inflight 0\n`,
		`\nlatch_forward_queued 0\n`, `\nlatch_leading 0\n`} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("follower metrics lack %s", re)
		}
	}
	if s := metricValue(body, "latch_raft_last_contact_seconds"); s == "" {
		t.Error("follower metrics lack latch_raft_last_contact_seconds")
	} else if v, err := strconv.ParseFloat(s, 64); err != nil || v < 0 || v > 10 {
		t.Errorf("follower latch_raft_last_contact_seconds %s, want a few heartbeats at most", s)
	}
	if _, body := httpGetQuiet(fc.http[l] + "/metrics"); !strings.Contains(body, "\nlatch_raft_last_contact_seconds 0\n") {
		t.Error("the leader's latch_raft_last_contact_seconds is not 0")
	}
}

// Backups are a cluster-mode feature: a single-mode server says so, and refuses (65).
func TestSnapshotOfASingleModeServer(t *testing.T) {
	p := startServer(t, nil)
	code, out := run(t, nil, "snapshot", "save", "--http", p.http, filepath.Join(t.TempDir(), "x.snap"))
	if code != exitRefused || !strings.Contains(out, "single-mode server") {
		t.Fatalf("snapshot save against single mode: exit %d, %q", code, out)
	}
}
