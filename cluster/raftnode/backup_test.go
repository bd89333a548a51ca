package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	oc "github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
)

// backup takes a backup on the leader n and returns it.
func backup(t testing.TB, n *Node) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := n.Backup(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A backup taken on one cluster and restored into a fresh one brings back every held lock
// on every member, with the counter at the requested floor when that is higher; the leader
// rebuilds its view (OnLeader again) and grants above the floor.
func TestBackupRestoreAcrossClusters(t *testing.T) {
	src := newCluster(t, 3, nil)
	l := src.leader()
	want := grantKeys(t, l.n, "k%02d", 20)
	if r, err := submit(t, l.n, release("k00", want["k00"])); err != nil || r.Kind != fsm.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
	delete(want, "k00")
	srcLast := l.n.FSM().LastToken()

	var buf bytes.Buffer
	info, err := l.n.Backup(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	if info.LastToken != srcLast || info.Keys != len(want) {
		t.Fatalf("backup info %+v, want last %d keys %d", info, srcLast, len(want))
	}
	for _, f := range src.followers() {
		if _, err := f.n.Backup(context.Background(), &bytes.Buffer{}); !errors.Is(err, oc.NotLeader) {
			t.Fatalf("backup on a follower: %v, want NotLeader", err)
		}
	}

	dst := newCluster(t, 3, nil)
	dl := dst.leader()
	fresh := grant(t, dl.n, "fresh-only") // state the restore must replace, not merge
	// IsLeader turns true just before OnLeader runs: wait for the call itself.
	eventually(t, "OnLeader called", func() bool { return dl.leads.Load() >= 1 })
	leadsBefore := dl.leads.Load()

	floor := uint64(srcLast) + 1000
	res, err := dl.n.Restore(context.Background(), buf.Bytes(), floor)
	if err != nil {
		t.Fatal(err)
	}
	if res.Floor != floor || res.Previous != uint64(fresh) || res.State.LastToken != fsm.Token(floor) || res.State.Keys != len(want) {
		t.Fatalf("restored %+v", res)
	}
	dst.converged(want, fsm.Token(floor))
	if got := dl.leads.Load(); got != leadsBefore+1 {
		t.Fatalf("OnLeader calls %d -> %d, want one more after the restore", leadsBefore, got)
	}
	if !dl.n.IsLeader() {
		t.Fatal("the leader did not resume leading after the restore")
	}
	if tok := grant(t, dl.n, "after"); tok != fsm.Token(floor)+1 {
		t.Fatalf("first grant after the restore = %d, want %d", tok, floor+1)
	}
	if r, _ := submit(t, dl.n, acquire("k05")); r.Kind != fsm.Held || r.Holder.Token != want["k05"] {
		t.Fatalf("a restored lock is not held: %+v", r)
	}

	// The restored state survives a full restart (it is in a snapshot on every member).
	want["after"] = fsm.Token(floor) + 1
	dst.shutdownAll()
	for _, tn := range dst.nodes {
		dst.restart(tn)
	}
	dst.leader()
	dst.converged(want, fsm.Token(floor)+1)
}

// A restore never lowers the counter below what the cluster already issued, whatever the
// backup and floor say; a corrupt backup is refused and changes nothing; followers refuse.
func TestRestoreNeverLowersCounter(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	empty := backup(t, l.n)
	var last fsm.Token
	for i := range 30 {
		last = grant(t, l.n, fmt.Sprintf("k%d", i))
	}
	held := tokensOf(l.n.FSM())

	bad := bytes.Clone(empty)
	bad[len(bad)-1] ^= 0xff
	if _, err := l.n.Restore(context.Background(), bad, 0); !errors.Is(err, fsm.ErrSnapshotCorrupt) {
		t.Fatalf("corrupt backup: %v, want ErrSnapshotCorrupt", err)
	}
	if _, err := c.followers()[0].n.Restore(context.Background(), empty, 0); !errors.Is(err, oc.NotLeader) {
		t.Fatalf("restore on a follower: %v, want NotLeader", err)
	}
	c.converged(held, last)

	res, err := l.n.Restore(context.Background(), empty, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Floor != uint64(last) || res.State.Keys != 0 {
		t.Fatalf("restored %+v, want floor %d and no keys", res, last)
	}
	c.converged(map[string]fsm.Token{}, last)
	if tok := grant(t, l.n, "k0"); tok != last+1 {
		t.Fatalf("grant after restoring an older backup = %d, want %d", tok, last+1)
	}
}

// An acquire the proposer packed just before a restore cleared leading (its leadership check
// passed, raft.Apply not yet called) is in raft before the restore's Barrier: the restore
// waits for it, its token counts in the floor, and no later grant repeats it.
func TestRestoreWaitsForAPackedEntry(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	empty := backup(t, l.n)
	grant(t, l.n, "before")

	entered, release := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	testHookBeforeApply = func() {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	}
	t.Cleanup(func() { testHookBeforeApply = nil })
	packed := make(chan outcome, 1)
	l.n.Submit(acquire("packed"), func(r fsm.Result, err error) { packed <- outcome{r, err} })
	<-entered

	restored := make(chan error, 1)
	var res Restored
	go func() {
		var err error
		res, err = l.n.Restore(context.Background(), empty, 0)
		restored <- err
	}()
	// A short window, but one a correct build cannot fail however slow the machine: its
	// restore cannot finish until release is closed; a slow machine can only let a bug pass.
	select {
	case err := <-restored:
		close(release)
		t.Fatalf("the restore finished (%v) while an entry it must wait for was still outside raft", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	if err := <-restored; err != nil {
		t.Fatalf("restore: %v", err)
	}
	o := <-packed
	if o.err != nil || o.res.Kind != fsm.Granted {
		t.Fatalf("the packed acquire: %+v, %v; want it granted before the restore", o.res, o.err)
	}
	if res.Floor < uint64(o.res.Token) {
		t.Fatalf("restore floor %d is below token %d, granted before it", res.Floor, o.res.Token)
	}
	if next := grant(t, l.n, "after"); next <= o.res.Token {
		t.Fatalf("grant after the restore = %d, not above %d granted before it", next, o.res.Token)
	}
}

// A restore whose caller gives up while raft installs the backup answers "maybe applied",
// but the node leads again (OnLeader, which rebuilds the lock view) only once raft has
// finished: the view is never rebuilt from the state being replaced.
func TestRestoreCallerGivesUpDuringInstall(t *testing.T) {
	var lastAtLead atomic.Uint64
	var c *tcluster
	c = newCluster(t, 3, func(cfg *Config) {
		id := cfg.ID
		cfg.OnLeader = func(f *fsm.FSM) {
			lastAtLead.Store(uint64(f.LastToken()))
			for _, tn := range c.nodes {
				if tn.id == id {
					tn.leads.Add(1)
				}
			}
		}
	})
	l := c.leader()
	for i := range 2000 { // a backup that takes raft a moment to install
		grant(t, l.n, fmt.Sprintf("key/%04d", i))
	}
	buf := backup(t, l.n)
	leads := l.leads.Load()

	ctx, cancel := context.WithCancel(context.Background())
	testHookBeforeRaftRestore = cancel
	t.Cleanup(func() { testHookBeforeRaftRestore = nil })
	_, err := l.n.Restore(ctx, buf, 1_000_000)
	if !errors.Is(err, oc.Indeterminate) {
		t.Fatalf("restore whose caller gave up = %v, want Indeterminate", err)
	}
	if l.leads.Load() != leads+1 || !l.n.IsLeader() {
		t.Fatalf("after the restore returned: %d OnLeader calls (want %d), leading %v", l.leads.Load(), leads+1, l.n.IsLeader())
	}
	if got := lastAtLead.Load(); got != 1_000_000 {
		t.Fatalf("OnLeader saw last token %d, want the restored state's floor 1000000", got)
	}
}
