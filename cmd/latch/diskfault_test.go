package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/clustertest/faultfs"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Failing disks and power cuts (issue 19, item 4), with the real binary: each node's
// --data-dir is on a fault filesystem of its own (cluster/clustertest/faultfs), which can
// fail every fsync with EIO, slow it down, or cut the power (keep only what was fsynced).
// The clients check what a lock service promises: every token a client saw is above every
// token granted before it (one client, one request at a time, so real-time order), none
// repeats, and a lock granted and still leased is still held after the fault.

// startFaultCluster starts n nodes as startTestCluster does, node i's data directory on the
// fault filesystem fss[i].
func startFaultCluster(t *testing.T, n int, extra ...string) (*testCluster, []*faultfs.FS) {
	t.Helper()
	root := t.TempDir()
	var fss []*faultfs.FS
	for i := range n {
		fss = append(fss, faultfs.Mount(t, filepath.Join(root, fmt.Sprintf("n%d", i+1))))
	}
	return startClusterAt(t, root, make([]string, n), func(int) []string { return extra }), fss
}

// tokens is what the test's clients were granted, in the order they were answered.
type tokens struct {
	t    *testing.T
	last uint64
	seen map[uint64]string
}

func newTokens(t *testing.T) *tokens { return &tokens{t: t, seen: map[uint64]string{}} }

// granted records a grant of key; it fails the test when the token repeats or is not above
// every token answered before it.
func (s *tokens) granted(key string, tok uint64) {
	s.t.Helper()
	if k, ok := s.seen[tok]; ok {
		s.t.Fatalf("token %d granted twice: for %q and now for %q", tok, k, key)
	}
	if tok <= s.last {
		s.t.Fatalf("token %d for %q after %d was granted: tokens went backwards", tok, key, s.last)
	}
	s.seen[tok], s.last = key, tok
}

// grant acquires and releases key through p once, recording the token; false when the node
// did not grant within a few seconds (it is down, or the cluster settles).
func (s *tokens) grant(p *proc, key string) bool {
	s.t.Helper()
	c, err := wiretest.DialErr(p.listen)
	if err != nil {
		return false
	}
	defer c.Close()
	c.Hello(s.t, nil)
	c.Raw(s.t, wiretest.Acquire(1, 0, 30, key))
	r, err := c.TryNext(5 * time.Second)
	if err != nil || r.Op != wire.OpAcquire {
		return false
	}
	s.granted(key, r.Token)
	c.Raw(s.t, wiretest.Release(1, r.Token, key))
	_, _ = c.TryNext(5 * time.Second) // a release may go unanswered when the node fails now
	return true
}

// grants takes n grants through p (retrying for up to 30 s each) and returns the last token.
func (s *tokens) grants(p *proc, prefix string, n int) uint64 {
	s.t.Helper()
	for i := range n {
		key := fmt.Sprintf("%s%d", prefix, i%8)
		deadline := time.Now().Add(30 * time.Second)
		for !s.grant(p, key) {
			if time.Now().After(deadline) {
				s.t.Fatalf("no grant of %q through %s within 30 s", key, p.listen)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s.last
}

// exited reports whether p has exited.
func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// TestDiskFsyncEIOFailStops: an fsync that fails with EIO makes the node stop at once, with
// one line that names the failed fsync and exit 74; the other two keep granting, and with
// the disk healed the node starts again from its data directory and catches up. First a
// follower's disk fails, then the leader's.
func TestDiskFsyncEIOFailStops(t *testing.T) {
	clustertest.Slow(t, "starts three processes on FUSE mounts")
	tc, fss := startFaultCluster(t, 3)
	seen := newTokens(t)
	for round, role := range []string{"follower", "leader"} {
		l := tc.leader()
		v := l
		if role == "follower" {
			v = (l + 1) % 3
		}
		other := (v + 1) % 3
		seen.grants(tc.procs[other], fmt.Sprintf("eio/%d/before/", round), 20)
		fss[v].FailFsync(syscall.EIO)
		began := time.Now()
		for i := 0; !tc.procs[v].hasExited(); i++ { // writes reach every node's disk
			if time.Since(began) > time.Minute || i == 2000 {
				t.Fatalf("the %s n%d still runs a minute after its fsyncs began to fail (%d failed):\n%s",
					role, v+1, failedOf(fss[v]), tc.procs[v].stderr.String())
			}
			seen.grant(tc.procs[other], fmt.Sprintf("eio/%d/during/%d", round, i%8))
		}
		code := tc.procs[v].wait(t, time.Second)
		t.Logf("the %s n%d exited %d after %v (%d fsyncs failed); its last lines:\n%s", role, v+1, code,
			time.Since(began).Round(time.Millisecond), failedOf(fss[v]), tail(tc.procs[v].stderr.String(), 3))
		if code != exitLocalIO || !strings.Contains(tc.procs[v].stderr.String(), "disk failure: stopping this node at once") ||
			!strings.Contains(tc.procs[v].stderr.String(), "input/output error") {
			t.Fatalf("the %s exited %d after a failed fsync, want %d and the line that names the failed write:\n%s",
				role, code, exitLocalIO, tail(tc.procs[v].stderr.String(), 5))
		}
		tc.leader(v)
		seen.grants(tc.procs[other], fmt.Sprintf("eio/%d/without/", round), 20)

		fss[v].FailFsync(0)
		tc.procs[v] = startServer(t, nil, tc.args[v]...)
		l = tc.leader()
		tc.caughtUp(t, v, l)
		seen.grants(tc.procs[v], fmt.Sprintf("eio/%d/after/", round), 10)
	}
}

func failedOf(f *faultfs.FS) int64 { _, failed := f.Fsyncs(); return failed }

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
