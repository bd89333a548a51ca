package raftnode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/latchd/latch/cluster/clustertest"
)

func tailSegment(t *testing.T, dataDir string) string {
	t.Helper()
	f := walFixture{dataDir: dataDir}
	segs := f.segments(t)
	return segs[len(segs)-1]
}

func wantAmnesia(t *testing.T, err error, dir string, mentions ...string) {
	t.Helper()
	wantBroken(t, err, dir, mentions...)
	if !errors.Is(err, errAmnesia) {
		t.Fatalf("error %v is not about state older than the promise", err)
	}
}

// A clean stop promises everything the node holds, and every way of losing part of it
// makes the next Open refuse, naming what was lost; the intact directory opens with every
// lock.
func TestPromiseRefusesAmnesia(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	firstDB := filepath.Join(t.TempDir(), "raft.db")
	c.shutdown(tn)
	copyFile(t, filepath.Join(tn.dir, "raft.db"), firstDB) // term of the first run
	c.restart(tn)
	tn = c.leader()
	want := grantKeys(t, tn.n, "k%d", 40)
	last := tn.n.FSM().LastToken()
	c.shutdown(tn)

	p, ok, err := readPromise(tn.dir)
	if err != nil || !ok {
		t.Fatalf("promise after a clean stop: %v %v", ok, err)
	}
	if p.Term < 2 || p.VoteTerm != p.Term || p.Vote == "" || p.LastIndex < 40 || p.LastTerm != p.Term {
		t.Fatalf("promise %+v does not hold the second run's term, vote and log end", p)
	}
	pristine := filepath.Join(t.TempDir(), "pristine")
	clustertest.CopyDir(t, tn.dir, pristine)

	cases := []struct {
		name    string
		damage  func(t *testing.T)
		mention string
	}{
		{"the log cut before the promised end", func(t *testing.T) {
			rewrite(t, tailSegment(t, tn.dir), func(b []byte) []byte {
				c := commitFrames(b)
				return b[:c[len(c)-6]+8] // five acknowledged batches gone
			})
		}, "acknowledged entries up to"},
		{"the tail segment deleted", func(t *testing.T) {
			if err := os.Remove(tailSegment(t, tn.dir)); err != nil {
				t.Fatal(err)
			}
		}, "is missing"},
		{"raft.db emptied", func(t *testing.T) {
			if err := os.Truncate(filepath.Join(tn.dir, "raft.db"), 0); err != nil {
				t.Fatal(err)
			}
		}, "holds no term"},
		{"raft.db deleted", func(t *testing.T) {
			if err := os.Remove(filepath.Join(tn.dir, "raft.db")); err != nil {
				t.Fatal(err)
			}
		}, "raft.db is missing"},
		{"raft.db of an older run", func(t *testing.T) {
			copyFile(t, firstDB, filepath.Join(tn.dir, "raft.db"))
		}, "it could vote twice"},
		{"the promise damaged", func(t *testing.T) {
			rewrite(t, filepath.Join(tn.dir, promiseFile), func(b []byte) []byte {
				i := strings.Index(string(b), `"last_index":`) + len(`"last_index":`)
				b[i] = '9'
				return b
			})
		}, "checksum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clustertest.ReplaceDir(t, pristine, tn.dir)
			tc.damage(t)
			wantAmnesia(t, openFails(t, c, tn, "opened a data dir that lost what it promised"), tn.dir, tc.mention)
			// Refusing changed nothing: a second try says the same.
			wantAmnesia(t, openFails(t, c, tn, "opened on the second try"), tn.dir, tc.mention)
		})
	}

	clustertest.ReplaceDir(t, pristine, tn.dir)
	c.restart(tn)
	tn = c.leader()
	if !fsmEquals(tn.n.FSM(), want, last) {
		t.Fatal("the intact directory lost locks")
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A crash leaves unacknowledged bytes after the log's end: the node starts, keeps every
// acknowledged lock, and appends over them.
func TestPromiseTornTailStarts(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	want := grantKeys(t, tn.n, "k%d", 20)
	last := tn.n.FSM().LastToken()
	c.shutdown(tn)
	rewrite(t, tailSegment(t, tn.dir), func(b []byte) []byte {
		end := (dataEnd(b) + 7) / 8 * 8
		b[end] = walFrameEntry
		b[end+4] = 200
		copy(b[end+8:], "half of an entry that was never fsynced")
		return b
	})
	c.restart(tn)
	tn = c.leader()
	if !fsmEquals(tn.n.FSM(), want, last) {
		t.Fatal("locks lost over a torn tail")
	}
	grantMore(t, tn.n, want, "after%d", 5)
	c.shutdown(tn)
	c.restart(tn)
	if !fsmEquals(c.leader().n.FSM(), want, c.leader().n.FSM().LastToken()) {
		t.Fatal("locks lost after appending over the torn tail")
	}
}

// A snapshot with a log that ends before it: refused when the node never promised that
// snapshot as its newest state (two histories), cleared and started when it did (a crash
// between installing a snapshot and clearing the log).
func TestPromiseSnapshotNewerThanLog(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	want := grantKeys(t, tn.n, "a%d", 10)
	c.shutdown(tn)
	oldWAL := filepath.Join(t.TempDir(), "wal")
	clustertest.CopyDir(t, filepath.Join(tn.dir, "wal"), oldWAL)
	c.restart(tn)
	tn = c.leader()
	grantMore(t, tn.n, want, "b%d", 30)
	snapshotNow(t, tn.n, tn.dir)
	last := tn.n.FSM().LastToken()
	c.shutdown(tn)
	pristine := filepath.Join(t.TempDir(), "pristine")
	clustertest.CopyDir(t, tn.dir, pristine)

	t.Run("a snapshot the node never promised as its newest", func(t *testing.T) {
		clustertest.ReplaceDir(t, pristine, tn.dir)
		clustertest.ReplaceDir(t, oldWAL, filepath.Join(tn.dir, "wal"))
		p, _, _ := readPromise(tn.dir)
		p.SnapshotIndex-- // as if the snapshot came from elsewhere
		if err := writePromise(tn.dir, p); err != nil {
			t.Fatal(err)
		}
		wantBroken(t, openFails(t, c, tn, "started from a snapshot and a log of two histories"), tn.dir, "newer than the raft log")
	})
	t.Run("the snapshot it installed, the log not yet cleared", func(t *testing.T) {
		clustertest.ReplaceDir(t, pristine, tn.dir)
		clustertest.ReplaceDir(t, oldWAL, filepath.Join(tn.dir, "wal"))
		p, _, _ := readPromise(tn.dir)
		if p.LastIndex > p.SnapshotIndex {
			p.LastIndex, p.LastTerm = p.SnapshotIndex, p.SnapshotTerm // as written at the install
			if err := writePromise(tn.dir, p); err != nil {
				t.Fatal(err)
			}
		}
		c.restart(tn)
		tn = c.leader()
		if !fsmEquals(tn.n.FSM(), want, last) {
			t.Fatal("locks lost")
		}
		grantMore(t, tn.n, want, "c%d", 3) // appends go on after the snapshot
		c.shutdown(tn)
	})
}

// Clearing the log's tail lowers the promise on disk before the entries go, so a crash in
// between never leaves a promise above the log; clearing the whole log after a snapshot
// install leaves the snapshot as the promised end.
func TestPromiseLoweredBeforeTailCleared(t *testing.T) {
	f := walFixture{dataDir: t.TempDir()}
	w := f.open(t, 0)
	defer f.close(t, w)
	k := newKeeper(f.dataDir, promise{})
	l := promisedLog{LogStore: w, k: k, disk: &diskFull{log: hclog.NewNullLogger()}}
	for i := uint64(1); i <= 10; i++ {
		if err := l.StoreLogs([]*raft.Log{{Index: i, Term: i, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.flush(); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := readPromise(f.dataDir); p.LastIndex != 10 || p.LastTerm != 10 {
		t.Fatalf("promise %+v after 10 appends", p)
	}
	if err := l.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := readPromise(f.dataDir); p.LastIndex != 7 || p.LastTerm != 7 {
		t.Fatalf("promise %+v after clearing 8-10, want 7 in term 7", p)
	}
	if err := l.DeleteRange(1, 3); err != nil { // a prefix: the end stays
		t.Fatal(err)
	}
	if p, _, _ := readPromise(f.dataDir); p.LastIndex != 7 {
		t.Fatalf("promise %+v after compacting 1-3", p)
	}
	k.set(func(p *promise) { p.SnapshotIndex, p.SnapshotTerm = 20, 12 })
	if err := l.DeleteRange(4, 7); err != nil { // removeOldLogs after an install
		t.Fatal(err)
	}
	if p, _, _ := readPromise(f.dataDir); p.LastIndex != 20 || p.LastTerm != 12 {
		t.Fatalf("promise %+v after clearing the log behind snapshot 20", p)
	}
}

// A vote is in the promise before raft acts on it.
func TestPromiseKeepsVote(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	s := promisedStable{StableStore: bolt, k: newKeeper(dir, promise{}), log: hclog.NewNullLogger(), disk: &diskFull{log: hclog.NewNullLogger()}}
	if err := s.SetUint64(keyCurrentTerm, 7); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64(keyLastVoteTerm, 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(keyLastVoteCand, []byte("n2")); err != nil {
		t.Fatal(err)
	}
	p, ok, err := readPromise(dir)
	if err != nil || !ok || p.Term != 7 || p.VoteTerm != 7 || p.Vote != "n2" {
		t.Fatalf("promise %+v %v %v, want term 7 and a vote for n2 in term 7", p, ok, err)
	}
}

// latch recover is the way back from a refusal: Inspect lists the damage, Recover accepts
// it (a one-voter cluster of what the directory still holds, its term above every term it
// promised), and the node starts and grants.
func TestRecoverAfterAmnesia(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	grantKeys(t, tn.n, "k%d", 30)
	c.shutdown(tn)
	promised, _, _ := readPromise(tn.dir)
	rewrite(t, tailSegment(t, tn.dir), func(b []byte) []byte {
		c := commitFrames(b)
		return b[:c[len(c)-4]+8]
	})
	if err := os.Truncate(filepath.Join(tn.dir, "raft.db"), 0); err != nil {
		t.Fatal(err)
	}
	wantAmnesia(t, openFails(t, c, tn, "opened a damaged directory"), tn.dir)

	ds, err := Inspect(tn.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := strings.Join(ds.Damage, "\n"); !strings.Contains(d, "holds no term") || !strings.Contains(d, "acknowledged entries up to") {
		t.Fatalf("inspect lists damage %q, want the lost term and the lost entries", ds.Damage)
	}
	if _, _, err := Recover(RecoverOptions{DataDir: tn.dir, ID: tn.id, Addr: tn.addr, TokenFloor: 1000}); err != nil {
		t.Fatal(err)
	}
	p, ok, err := readPromise(tn.dir)
	if err != nil || !ok || p.Term <= promised.Term {
		t.Fatalf("promise after recover %+v (%v %v); want a term above the promised %d", p, ok, err, promised.Term)
	}
	c.restart(tn)
	if tok := grant(t, c.leader().n, "after"); tok != 1001 {
		t.Fatalf("first grant after recovery = %d, want 1001", tok)
	}
}

// A promise behind raft.db's term is what an older latch leaves (it keeps none, and may
// have cleared a tail meanwhile): the start goes ahead without holding the log to it, and
// the promise is brought up to date.
func TestPromiseOlderThanRaftDBStarts(t *testing.T) {
	c := newCluster(t, 1, nil)
	tn := c.leader()
	want := grantKeys(t, tn.n, "k%d", 20)
	last := tn.n.FSM().LastToken()
	c.shutdown(tn)
	p, _, _ := readPromise(tn.dir)
	p.Term--
	p.LastIndex += 1000 // entries the older latch's new leader cleared
	if err := writePromise(tn.dir, p); err != nil {
		t.Fatal(err)
	}
	c.restart(tn)
	tn = c.leader()
	if !fsmEquals(tn.n.FSM(), want, last) {
		t.Fatal("locks lost")
	}
	c.shutdown(tn)
	if q, _, _ := readPromise(tn.dir); q.LastIndex >= p.LastIndex || q.Term <= p.Term {
		t.Fatalf("promise %+v not brought up to date (was %+v)", q, p)
	}
}
