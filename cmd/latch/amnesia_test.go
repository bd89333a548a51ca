package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// No amnesia, with the real binary (cluster/raftnode/promise.go, walscan.go, check.go): a
// follower is stopped cleanly (which writes its promise), its data directory is damaged in
// each way a disk or an operator can damage it, and the same binary started with the same
// flags must exit 74 with one line that says what is wrong. The pristine directory, put
// back, starts and rejoins.

// refusalPrefix starts the one line a refused start prints on stderr.
const refusalPrefix = "latch server: raftnode: the data directory cannot be started from: "

// nodeDir is node i's --data-dir.
func (tc *testCluster) nodeDir(i int) string {
	return filepath.Join(tc.dataDir, fmt.Sprintf("n%d", i+1))
}

// refused starts node i with its flags and checks that it exits 74 and that its last line
// of stderr is the refusal, naming the directory, the way back and want.
func (tc *testCluster) refused(t *testing.T, i int, want string) {
	t.Helper()
	p := spawnServer(t, nil, tc.args[i]...)
	if code := p.wait(t, time.Minute); code != exitLocalIO {
		t.Fatalf("exit %d from a damaged data dir, want %d:\n%s", code, exitLocalIO, p.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	last := lines[len(lines)-1]
	for _, s := range []string{tc.nodeDir(i), want, "latch recover", "rejoins empty"} {
		if !strings.HasPrefix(last, refusalPrefix) || !strings.Contains(last, s) {
			t.Fatalf("the last line of stderr does not start %q and name %q:\n%s", refusalPrefix, s, last)
		}
	}
	t.Logf("refused: %s", strings.TrimPrefix(last, refusalPrefix))
}

// caughtUp waits until node i's log reaches the commit index node l reports.
func (tc *testCluster) caughtUp(t *testing.T, i, l int) {
	t.Helper()
	s, ok := tc.procs[l].logProgress()
	if !ok {
		t.Fatalf("no /v1/status from n%d", l+1)
	}
	clustertest.Eventually(t, 30*time.Second, fmt.Sprintf("n%d holds the log up to %d", i+1, s.Raft.CommitIndex), func() bool {
		f, ok := tc.procs[i].logProgress()
		return ok && f.Raft.LastLogIndex >= s.Raft.CommitIndex
	})
}

// grantMany takes and gives back n locks through p, one at a time (so that a follower's log
// holds many small batches), and returns the last token.
func grantMany(t *testing.T, p *proc, prefix string, n int) uint64 {
	t.Helper()
	c := p.dial(t)
	defer c.Close()
	var last uint64
	for i := range n {
		key := fmt.Sprintf("%s%d", prefix, i%8)
		r := c.Do(t, wiretest.Acquire(uint64(i+1), 0, 30, key))
		if r.Op != wire.OpAcquire || r.Token <= last {
			t.Fatalf("acquire %d: %s after token %d", i, wiretest.Describe(r), last)
		}
		last = r.Token
		if rr := c.Do(t, wiretest.Release(uint64(i+1), r.Token, key)); rr.Op != wire.OpRelease {
			t.Fatalf("release %d: %s", i, wiretest.Describe(rr))
		}
	}
	return last
}

// segmentOf is the path of the newest raft-wal segment file in dataDir (the tail: names
// start with the zero-padded base index).
func segmentOf(t *testing.T, dataDir string) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dataDir, "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatalf("no segment file in %s/wal", dataDir)
	}
	slices.Sort(segs)
	return segs[len(segs)-1]
}

// walFrame is one frame of a raft-wal segment (raft-wal's segment/format.go: a 32-byte file
// header, then 8-byte aligned frames, each an 8-byte header (type, 3 zero bytes, length or
// for a commit frame the batch's CRC) and its padded payload).
type walFrame struct {
	off, len int
	typ      byte
}

const (
	walFileHeader = 32
	walEntry      = 1
	walCommit     = 3
)

// segmentFrames reads the frames of seg up to its last commit frame and returns them and
// the offset just past it: the end of the data a node acknowledged.
func segmentFrames(t *testing.T, seg []byte) ([]walFrame, int) {
	t.Helper()
	var frames []walFrame
	n, end := 0, 0
	for off := walFileHeader; off+8 <= len(seg) && seg[off] != 0; {
		f := walFrame{off: off, typ: seg[off], len: int(binary.LittleEndian.Uint32(seg[off+4:]))}
		frames = append(frames, f)
		off += 8
		if f.typ == walCommit {
			n, end = len(frames), off
		} else {
			off += (f.len + 7) / 8 * 8
		}
	}
	if end == 0 {
		t.Fatal("the segment holds no commit frame")
	}
	return frames[:n], end
}

// editSegment reads dataDir's tail segment, lets edit change it (edit returns what to
// write) and writes it back in place.
func editSegment(t *testing.T, dataDir string, edit func(seg []byte, frames []walFrame, end int) []byte) {
	t.Helper()
	path := segmentOf(t, dataDir)
	seg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frames, end := segmentFrames(t, seg)
	if end < 32<<10 {
		t.Fatalf("the segment holds only %d bytes of data: too little to damage its middle", end)
	}
	if err := os.WriteFile(path, edit(seg, frames, end), 0o600); err != nil {
		t.Fatal(err)
	}
}

// lastNonZero is the offset just past the last byte of b that is not zero.
func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i + 1
		}
	}
	return 0
}

// The damages, each planted in a stopped node's data directory.

func truncateSegmentHalf(t *testing.T, dir string) {
	editSegment(t, dir, func(seg []byte, _ []walFrame, _ int) []byte { return seg[:lastNonZero(seg)/2] })
}

func zeroSegmentHalf(t *testing.T, dir string) {
	editSegment(t, dir, func(seg []byte, _ []walFrame, _ int) []byte {
		end := lastNonZero(seg)
		clear(seg[end/2 : end])
		return seg
	})
}

func garbageInSegment(t *testing.T, dir string) {
	editSegment(t, dir, func(seg []byte, _ []walFrame, end int) []byte {
		rng := rand.New(rand.NewPCG(19, 1))
		for i := end / 2; i < end/2+4096; i++ {
			seg[i] = byte(rng.Uint32())
		}
		return seg
	})
}

// garbageInPayload changes the last bytes of an entry's payload in the middle of the
// segment, leaving every frame header (and the entry's index and term) intact: raft-wal
// reads frames by their headers and checks the checksum of the tail's last batch only.
func garbageInPayload(t *testing.T, dir string) {
	editSegment(t, dir, func(seg []byte, frames []walFrame, end int) []byte {
		for _, f := range frames {
			if f.typ == walEntry && f.off > end/2 && f.len >= 24 {
				p := seg[f.off+8 : f.off+8+f.len]
				for i := len(p) - 4; i < len(p); i++ {
					p[i] ^= 0x5a
				}
				return seg
			}
		}
		t.Fatal("no entry frame in the second half of the segment")
		return nil
	})
}

func removeFile(name string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func removeSegment(t *testing.T, dir string) {
	if err := os.Remove(segmentOf(t, dir)); err != nil {
		t.Fatal(err)
	}
}

func emptyRaftDB(t *testing.T, dir string) {
	if err := os.Truncate(filepath.Join(dir, "raft.db"), 0); err != nil {
		t.Fatal(err)
	}
}

func flipPromiseByte(t *testing.T, dir string) {
	path := filepath.Join(dir, "promised.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceTree replaces dir/name with a copy of from/name.
func replaceTree(t *testing.T, from, dir, name string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	clustertest.CopyDir(t, filepath.Join(from, name), filepath.Join(dir, name))
}

// TestAmnesiaRefusesADamagedDataDir plants each damage of issue 19 in a follower's data
// directory: a log segment truncated, zeroed or overwritten in its middle, or deleted;
// raft.db emptied or deleted; promised.json damaged; a snapshot newer than the log. Each is
// refused; latch recover reads a refused directory, says what is lost and makes it a
// one-node cluster that starts; the pristine directory rejoins.
func TestAmnesiaRefusesADamagedDataDir(t *testing.T) {
	clustertest.Slow(t, "starts three processes and a dozen refused ones")
	sec := newTestSecrets(t)
	tc := startTestCluster(t, 3, "--peer-secret-file", sec.peer, "--admin-secret-file", sec.admin)
	l := tc.leader()
	f := (l + 1) % 3
	tok := grantMany(t, tc.procs[l], "amnesia/", 400)
	tc.caughtUp(t, f, l)
	tc.procs[f].stop(t, "the follower")
	dir := tc.nodeDir(f)
	old := filepath.Join(t.TempDir(), "pristine")
	clustertest.CopyDir(t, dir, old)

	for _, c := range []struct {
		name, want string
		plant      func(t *testing.T, dir string)
	}{
		{"segment truncated", "acknowledged entries up to", truncateSegmentHalf},
		{"segment zeroed", "acknowledged entries up to", zeroSegmentHalf},
		{"garbage in the segment", "an intact batch follows", garbageInSegment},
		{"garbage in a payload", "fails its checksum, but an intact batch follows", garbageInPayload},
		{"segment deleted", "is missing, but this node acknowledged entries up to", removeSegment},
		{"raft.db emptied", "holds no term", emptyRaftDB},
		{"raft.db deleted", "raft.db is missing beside", removeFile("raft.db")},
		{"promise damaged", "promised.json is damaged", flipPromiseByte},
	} {
		t.Run(c.name, func(t *testing.T) {
			clustertest.ReplaceDir(t, old, dir)
			c.plant(t, dir)
			tc.refused(t, f, c.want)
		})
	}

	t.Run("recover", func(t *testing.T) {
		clustertest.ReplaceDir(t, old, dir)
		truncateSegmentHalf(t, dir)
		rdir := filepath.Join(t.TempDir(), "recovered")
		clustertest.CopyDir(t, dir, rdir)
		code, out := run(t, nil, "recover", "--data-dir", rdir, "--dry-run")
		if code != 0 || !strings.Contains(out, "\ndamage: the raft log in ") || !strings.Contains(out, "acknowledged entries up to") {
			t.Fatalf("recover --dry-run of a directory that lost entries: exit %d, want 0 and a damage line:\n%s", code, out)
		}
		if code, out := run(t, nil, "recover", "--data-dir", rdir, "--dry-run", "--json"); code != 0 || !strings.Contains(out, `"damage":["the raft log in `) {
			t.Fatalf("recover --dry-run --json: exit %d, want the damage:\n%s", code, out)
		}
		id, addr, floor := fmt.Sprintf("n%d", f+1), clustertest.FreePorts(t, 1)[0], tok+1000
		code, out = run(t, nil, "recover", "--data-dir", rdir, "--id", id, "--advertise", addr, "--token-floor", strconv.FormatUint(floor, 10))
		if code != 0 {
			t.Fatalf("recover: exit %d:\n%s", code, out)
		}
		p := startServer(t, nil, "--mode", "cluster", "--id", id, "--data-dir", rdir, "--raft-addr", addr)
		if got := grantThrough(t, p, "amnesia/recovered"); got <= floor {
			t.Fatalf("token %d from the recovered node, not above the floor %d", got, floor)
		}
		p.stop(t, "the recovered node")
	})

	// The pristine directory starts and rejoins.
	clustertest.ReplaceDir(t, old, dir)
	tc.procs[f] = startServer(t, nil, tc.args[f]...)
	tc.leader()
	grantThrough(t, tc.procs[f], "amnesia/rejoined")

	// A snapshot: a backup restored is installed on every member as a snapshot (raft's user
	// restore), after which the follower's log continues from it.
	l = tc.leader()
	backup := filepath.Join(t.TempDir(), "backup.snap")
	admin := []string{"--http", tc.procs[l].http, "--admin-secret-file", sec.admin}
	if code, out := run(t, nil, append(append([]string{"snapshot", "save"}, admin...), backup)...); code != 0 {
		t.Fatalf("snapshot save: exit %d:\n%s", code, out)
	}
	if code, out := run(t, nil, append(append([]string{"snapshot", "restore"}, admin...), "--token-floor", "0", backup)...); code != 0 {
		t.Fatalf("snapshot restore: exit %d:\n%s", code, out)
	}
	clustertest.Eventually(t, 30*time.Second, "the follower installs the restored snapshot", func() bool {
		snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
		return len(snaps) > 0
	})
	l = tc.leader()
	grantMany(t, tc.procs[l], "amnesia/after-snapshot/", 20)
	tc.caughtUp(t, f, l)
	tc.procs[f].stop(t, "the follower")
	newer := filepath.Join(t.TempDir(), "newer")
	clustertest.CopyDir(t, dir, newer)

	t.Run("snapshot newer than the log", func(t *testing.T) {
		clustertest.ReplaceDir(t, old, dir)
		replaceTree(t, newer, dir, "snapshots")
		tc.refused(t, f, "is newer than the raft log")
	})
	t.Run("snapshot with an older log", func(t *testing.T) {
		clustertest.ReplaceDir(t, newer, dir)
		replaceTree(t, old, dir, "wal")
		tc.refused(t, f, "acknowledged entries up to")
		// Nothing was changed before the refusal: the log planted is still there to look at.
		if got, want := segmentOf(t, dir), filepath.Join(dir, "wal", filepath.Base(segmentOf(t, old))); got != want {
			t.Fatalf("after the refused start the log's tail segment is %s, not the %s planted", got, want)
		}
		code, out := run(t, nil, "recover", "--data-dir", dir, "--dry-run")
		if code != 0 || !strings.Contains(out, "\ndamage: ") || segmentOf(t, dir) != filepath.Join(dir, "wal", filepath.Base(segmentOf(t, old))) {
			t.Fatalf("recover --dry-run: exit %d, want 0, a damage line and the log left alone (tail %s):\n%s", code, segmentOf(t, dir), out)
		}
	})

	clustertest.ReplaceDir(t, newer, dir)
	tc.procs[f] = startServer(t, nil, tc.args[f]...)
	tc.leader()
	grantThrough(t, tc.procs[f], "amnesia/rejoined-after-snapshot")
}
