package main

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// What a crash leaves must still start (the other half of no amnesia, amnesia_test.go): a
// torn last write, which was never acknowledged, and whatever kill -9 under load leaves.

// plantTornBatch writes the start of a batch after the segment's last commit frame: an entry
// frame's header and the first bytes of its payload (the next index and the same term), as
// a crash leaves a write that reached the disk only in part. Nothing of it was acknowledged.
func plantTornBatch(t *testing.T, dir string) {
	editSegment(t, dir, func(seg []byte, frames []walFrame, end int) []byte {
		var idx, term uint64
		for _, f := range frames {
			if f.typ == walEntry {
				p := seg[f.off+8:]
				i, n := binary.Uvarint(p)
				tm, _ := binary.Uvarint(p[n:])
				idx, term = i, tm
			}
		}
		torn := []byte{walEntry, 0, 0, 0, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(torn[4:], 200)
		torn = binary.AppendUvarint(torn, idx+1)
		torn = binary.AppendUvarint(torn, term)
		torn = append(torn, 0xab, 0xcd, 0xef)
		copy(seg[end:], torn)
		return seg
	})
}

// plantTornCommit writes the segment's last batch again after it, as the next batch (its
// entries renumbered to follow), with the old batch's checksum: a write whose commit frame
// reached the disk while a sector of its entries did not. It was never acknowledged.
func plantTornCommit(t *testing.T, dir string) {
	editSegment(t, dir, func(seg []byte, frames []walFrame, end int) []byte {
		start, entries := walFileHeader, 0
		for _, f := range frames[:len(frames)-1] {
			if f.typ == walCommit {
				start, entries = f.off+8, 0
			} else if f.typ == walEntry {
				entries++
			}
		}
		n := copy(seg[end:], seg[start:end])
		for _, f := range frames {
			if f.typ != walEntry || f.off < start {
				continue
			}
			p := seg[f.off+8-start+end:]
			idx, k := binary.Uvarint(p)
			if binary.PutUvarint(p, idx+uint64(entries)) != k {
				t.Fatalf("entry %d renumbered to %d changes its length", idx, idx+uint64(entries))
			}
		}
		if n != end-start || entries == 0 {
			t.Fatalf("no room or no entries for a torn batch after offset %d", end)
		}
		return seg
	})
}

// TestAmnesiaCrashLeftoversStart: a follower whose log ends in a torn batch starts, drops
// it, rejoins and serves, and starts again after raft-wal wrote over it; then nodes killed
// with SIGKILL under a write load (a follower, the leader, a follower) restart every time.
func TestAmnesiaCrashLeftoversStart(t *testing.T) {
	clustertest.Slow(t, "starts three processes and restarts them")
	tc := startTestCluster(t, 3)
	l := tc.leader()
	f := (l + 1) % 3
	grantMany(t, tc.procs[l], "torn/", 400)
	tc.caughtUp(t, f, l)
	tc.procs[f].stop(t, "the follower")
	for _, torn := range []struct {
		name  string
		plant func(t *testing.T, dir string)
		log   string // what the node logs about it
	}{
		{"a batch cut short", plantTornBatch, ""},
		{"a batch that fails its checksum", plantTornCommit, "fails its checksum"},
	} {
		torn.plant(t, tc.nodeDir(f))
		for round := range 2 { // the torn batch, then what raft-wal appended over it
			tc.procs[f] = startServer(t, nil, tc.args[f]...)
			if log := tc.procs[f].stderr.String(); round == 0 && torn.log != "" &&
				(!strings.Contains(log, "torn by a crash") || !strings.Contains(log, torn.log)) {
				t.Fatalf("%s: the node did not log that it dropped a torn write that %s:\n%s", torn.name, torn.log, log)
			}
			tc.leader()
			grantThrough(t, tc.procs[f], fmt.Sprintf("torn/after/%d", round))
			tc.caughtUp(t, f, tc.leader())
			tc.procs[f].stop(t, "the follower")
		}
	}
	tc.procs[f] = startServer(t, nil, tc.args[f]...)

	var last uint64
	for round := range 3 {
		l := tc.leader()
		victim := (l + 1) % 3
		if round == 1 {
			victim = l
		}
		var servers []string
		for _, p := range tc.procs {
			servers = append(servers, p.listen)
		}
		load, out, _ := start(t, nil, "bench", "--servers", strings.Join(servers, ","), "--clients", "8", "--keys", "8",
			"--duration", "10m", "--warmup", "0s", "--wait", "5s")
		before, ok := tc.procs[l].logProgress()
		if !ok {
			t.Fatalf("no /v1/status from the leader n%d", l+1)
		}
		began := time.Now()
		for s := before; !ok || s.Raft.CommitIndex < before.Raft.CommitIndex+100; s, ok = tc.procs[l].logProgress() {
			if time.Since(began) > time.Minute {
				t.Fatalf("the load committed %d entries in a minute, want 100:\n%s", s.Raft.CommitIndex-before.Raft.CommitIndex, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		tc.procs[victim].kill(t)
		tc.procs[victim] = startServer(t, nil, tc.args[victim]...)
		tc.leader()
		tok := grantThrough(t, tc.procs[victim], fmt.Sprintf("killed/%d", round))
		load.Process.Kill()
		t.Logf("round %d: n%d killed under load (leader n%d), restarted, granted token %d through it", round, victim+1, l+1, tok)
		if tok <= last {
			t.Fatalf("token %d after the restart, not above %d", tok, last)
		}
		last = tok
	}
}
