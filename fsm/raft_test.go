package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func newFSM(t testing.TB, floor Token) *FSM {
	t.Helper()
	f, err := NewFSM(floor)
	if err != nil {
		t.Fatalf("NewFSM(%d): %v", floor, err)
	}
	return f
}

func entry(t testing.TB, index uint64, cmds ...Command) *raft.Log {
	t.Helper()
	data, err := AppendBatch(nil, cmds)
	if err != nil {
		t.Fatalf("AppendBatch: %v", err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

func results(t testing.TB, resp any) []Result {
	t.Helper()
	res, ok := resp.([]Result)
	if !ok {
		t.Fatalf("response %T %v, want []Result", resp, resp)
	}
	return res
}

// state is everything an FSM decides with, for comparisons.
type state struct {
	held     map[string]Holder
	last     Token
	features Features
	applied  uint64
	bytes    []byte // the snapshot it writes
}

func stateOf(t testing.TB, f *FSM) state {
	t.Helper()
	var s state
	f.Read(func(tb *Table) {
		s.held = make(map[string]Holder, tb.Len())
		tb.Range(func(k string, h Holder) bool { s.held[k] = h; return true })
		s.last = tb.LastToken()
		s.features = tb.Features()
		s.applied = f.AppliedIndex()
		var buf bytes.Buffer
		if err := WriteSnapshot(&buf, tb, s.applied); err != nil {
			t.Fatalf("WriteSnapshot: %v", err)
		}
		s.bytes = buf.Bytes()
	})
	return s
}

func sameState(a, b state) bool {
	return equalState(a.held, b.held) && a.last == b.last && a.features == b.features && a.applied == b.applied &&
		bytes.Equal(a.bytes, b.bytes)
}

func (s state) String() string {
	return fmt.Sprintf("{%d keys, last %d, features %v, applied %d}", len(s.held), s.last, s.features, s.applied)
}

// persist takes a snapshot of f and returns its bytes, checking that the
// sink was closed and not cancelled.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("Persist left the sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func restore(t testing.TB, f *FSM, data []byte) error {
	t.Helper()
	rc := &closeTracker{Reader: bytes.NewReader(data)}
	err := f.Restore(rc)
	if !rc.closed {
		t.Fatal("Restore did not close its reader")
	}
	return err
}

func TestNewFSMFloor(t *testing.T) {
	f := newFSM(t, 41)
	if f.LastToken() != 41 || f.Len() != 0 || f.AppliedIndex() != 0 {
		t.Fatalf("new FSM: last %d len %d applied %d", f.LastToken(), f.Len(), f.AppliedIndex())
	}
	if f, err := NewFSM(MaxToken + 1); !errors.Is(err, ErrFloorRange) || f != nil {
		t.Fatalf("NewFSM(MaxToken+1) = %v, %v; want nil, ErrFloorRange", f, err)
	}
}

func TestFSMApply(t *testing.T) {
	f := newFSM(t, 0)
	res := results(t, f.Apply(entry(t, 3, acq("a", 10), acq("a", 10), acq("b", 20))))
	want := []Result{
		{Kind: Granted, Token: 1, Holder: Holder{Token: 1, Lease: 10}, Key: "a"},
		{Kind: Held, Holder: Holder{Token: 1, Lease: 10}},
		{Kind: Granted, Token: 2, Holder: Holder{Token: 2, Lease: 20}, Key: "b"},
	}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("results %+v, want %+v", res, want)
	}
	if f.AppliedIndex() != 3 {
		t.Fatalf("AppliedIndex = %d, want 3", f.AppliedIndex())
	}
	if h, ok := f.Holder([]byte("b")); !ok || h != (Holder{Token: 2, Lease: 20}) {
		t.Fatalf("Holder(b) = %+v, %v", h, ok)
	}

	// A configuration entry changes nothing but the applied index.
	before := stateOf(t, f)
	if resp := f.Apply(&raft.Log{Index: 4, Type: raft.LogConfiguration, Data: []byte("whatever")}); resp != nil {
		t.Fatalf("configuration entry answered %v, want nil", resp)
	}
	if f.AppliedIndex() != 4 {
		t.Fatalf("AppliedIndex = %d, want 4", f.AppliedIndex())
	}
	after := stateOf(t, f)
	if !equalState(before.held, after.held) || before.last != after.last {
		t.Fatalf("a configuration entry changed the state: %v -> %v", before, after)
	}
	// Entries that do not decode halt the FSM: TestFSMHaltsOnUndecodableEntries.
}

func TestFSMApplyBatch(t *testing.T) {
	f := newFSM(t, 100)
	logs := []*raft.Log{
		entry(t, 10, acq("a", 1)),
		{Index: 11, Type: raft.LogConfiguration},
		entry(t, 12, rel("a", 101), acq("a", 2)),
		entry(t, 13, exp("a", 101)),
		entry(t, 14),
		entry(t, 15, flr(MaxToken), acq("b", 1)),
	}
	resps := f.ApplyBatch(logs)
	if len(resps) != len(logs) {
		t.Fatalf("%d responses for %d logs", len(resps), len(logs))
	}
	if r := results(t, resps[0]); len(r) != 1 || r[0].Kind != Granted || r[0].Token != 101 {
		t.Fatalf("response 0: %+v", r)
	}
	if resps[1] != nil {
		t.Fatalf("response 1 (configuration): %v", resps[1])
	}
	if r := results(t, resps[2]); len(r) != 2 || r[0].Kind != Released || r[1].Kind != Granted || r[1].Token != 102 {
		t.Fatalf("response 2: %+v", r)
	}
	if r := results(t, resps[3]); len(r) != 1 || r[0].Kind != Stale || r[0].Holder != (Holder{Token: 102, Lease: 2}) {
		t.Fatalf("response 3: %+v", r)
	}
	if r := results(t, resps[4]); len(r) != 0 {
		t.Fatalf("response 4 (empty batch): %+v", r)
	}
	if r := results(t, resps[5]); len(r) != 2 || r[0].Kind != Floored || r[1].Kind != Exhausted {
		t.Fatalf("response 5: %+v", r)
	}
	if f.AppliedIndex() != 15 || f.LastToken() != MaxToken || f.Len() != 1 {
		t.Fatalf("after batch: applied %d last %d len %d", f.AppliedIndex(), f.LastToken(), f.Len())
	}
	if got := f.ApplyBatch(nil); len(got) != 0 || f.AppliedIndex() != 15 {
		t.Fatalf("empty ApplyBatch: %v, applied %d", got, f.AppliedIndex())
	}
}

// TestFSMDoesNotTouchLogData: the log's bytes are shared with the log store
// (and, on the in-memory transport, with other nodes).
func TestFSMDoesNotTouchLogData(t *testing.T) {
	f := newFSM(t, 0)
	l := entry(t, 1, acq("abc", 1), rel("abc", 1), acq("abc", 2), exp("x", 5), flr(9))
	orig := bytes.Clone(l.Data)
	res := results(t, f.Apply(l))
	if !bytes.Equal(l.Data, orig) {
		t.Fatal("Apply modified Log.Data")
	}
	for i := range l.Data {
		l.Data[i] = 0 // the FSM must have kept no alias
	}
	if res[2].Key != "abc" {
		t.Fatalf("granted key %q", res[2].Key)
	}
	if h, ok := f.Holder([]byte("abc")); !ok || h.Token != 2 {
		t.Fatalf("Holder(abc) = %+v, %v after the entry was wiped", h, ok)
	}
	f.cmds = f.cmds[:cap(f.cmds)]
	for i, c := range f.cmds {
		if c.Key != nil {
			t.Fatalf("scratch command %d still points into a log entry", i)
		}
	}
}

func TestFSMSnapshotIsPointInTime(t *testing.T) {
	f := newFSM(t, 0)
	f.Apply(entry(t, 1, acq("a", 1), acq("b", 2)))
	want := stateOf(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Applies after Snapshot, before Persist, must not show.
	f.Apply(entry(t, 2, rel("a", 1), acq("c", 3), flr(50)))
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !bytes.Equal(sink.Bytes(), want.bytes) {
		t.Fatal("persisted snapshot is not the state at Snapshot()")
	}
}

// TestFSMAppliesWhilePersisting: Snapshot blocks Apply only while it copies the table;
// writing the copy out (Persist, on raft's snapshot goroutine) holds no lock, so Apply goes
// on while a slow disk takes the snapshot. The speed of the copy itself is measured by
// BenchmarkSnapshot1M, not asserted here.
func TestFSMAppliesWhilePersisting(t *testing.T) {
	f := newFSM(t, 0)
	f.Apply(entry(t, 1, acq("a", 1)))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &stallSink{writing: make(chan struct{}), resume: make(chan struct{})}
	persisted := make(chan error, 1)
	go func() { persisted <- snap.Persist(sink) }()
	<-sink.writing
	next := entry(t, 2, acq("b", 2))
	applied := make(chan any, 1)
	go func() { applied <- f.Apply(next) }()
	select {
	case r := <-applied:
		if rs, ok := r.([]Result); !ok || len(rs) != 1 || rs[0].Kind != Granted {
			t.Fatalf("Apply during Persist = %#v, want one grant", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Apply waited for a Persist in progress")
	}
	close(sink.resume)
	if err := <-persisted; err != nil {
		t.Fatal(err)
	}
}

// stallSink is a snapshot sink whose first Write says so on writing and then waits for
// resume.
type stallSink struct {
	memSink
	writing, resume chan struct{}
	started         bool
}

func (s *stallSink) Write(p []byte) (int, error) {
	if !s.started {
		s.started = true
		close(s.writing)
		<-s.resume
	}
	return s.memSink.Write(p)
}

func TestFSMPersistCancelsOnError(t *testing.T) {
	f := newFSM(t, 0)
	cmds := make([]Command, 0, 5000)
	for i := range 5000 {
		cmds = append(cmds, acq(fmt.Sprintf("%0100d", i), 1))
	}
	f.Apply(entry(t, 1, cmds...))
	snap, _ := f.Snapshot()
	defer snap.Release()
	sink := &memSink{failAfter: 100_000}
	if err := snap.Persist(sink); !errors.Is(err, errSinkFull) {
		t.Fatalf("Persist err = %v, want the sink's error", err)
	}
	if !sink.cancelled || sink.closed {
		t.Fatalf("failed Persist: closed=%v cancelled=%v, want cancelled only", sink.closed, sink.cancelled)
	}
}

// TestFSMRestoreReplaces: Restore discards everything, including a higher
// counter and keys the snapshot does not have; it never merges.
func TestFSMRestoreReplaces(t *testing.T) {
	src := newFSM(t, 0)
	src.Apply(entry(t, 5, acq("a", 1), acq("shared", 2)))
	data := persist(t, src)

	dst := newFSM(t, 0)
	dst.Apply(entry(t, 90, flr(1_000_000), acq("only-dst", 3), acq("shared", 4)))
	if err := restore(t, dst, data); err != nil {
		t.Fatal(err)
	}
	got, want := stateOf(t, dst), stateOf(t, src)
	if !sameState(got, want) {
		t.Fatalf("restored %v %v, want %v %v", got, got.held, want, want.held)
	}
	if _, ok := dst.Holder([]byte("only-dst")); ok {
		t.Fatal("restore merged a key the snapshot does not hold")
	}
	if r := results(t, dst.Apply(entry(t, 6, acq("b", 1)))); r[0].Token != 3 {
		t.Fatalf("first grant after restore: %+v, want token 3", r[0])
	}
}

// TestFSMRestoreCorruptKeepsState: every corrupt snapshot fails and leaves
// the FSM exactly as it was.
func TestFSMRestoreCorruptKeepsState(t *testing.T) {
	f := newFSM(t, 0)
	f.Apply(entry(t, 40, flr(7000), acq("mine", 30), acq("also-mine", 60)))
	want := stateOf(t, f)
	for name, tc := range corruptSnapshots(t) {
		if tc.want == nil {
			continue
		}
		err := restore(t, f, tc.data)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Restore err = %v, want %v", name, err, tc.want)
		}
		if got := stateOf(t, f); !sameState(got, want) {
			t.Fatalf("%s: failed Restore changed the state: %v -> %v", name, want, got)
		}
	}
	// A reader that fails part way.
	good := persist(t, newFSM(t, 3))
	boom := errors.New("network reset")
	rc := io.NopCloser(io.MultiReader(bytes.NewReader(good[:20]), errReader{boom}))
	if err := f.Restore(rc); !errors.Is(err, boom) {
		t.Fatalf("Restore err = %v, want the reader's", err)
	}
	if got := stateOf(t, f); !sameState(got, want) {
		t.Fatalf("failed Restore changed the state: %v -> %v", want, got)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestFSMConcurrentReaders runs leader-side readers against applies,
// snapshots and restores; -race checks the locking.
func TestFSMConcurrentReaders(t *testing.T) {
	f := newFSM(t, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			key := []byte("k0")
			for {
				select {
				case <-stop:
					return
				default:
				}
				f.Holder(key)
				_ = f.LastToken() + Token(f.Len()) + Token(f.AppliedIndex())
				f.Read(func(tb *Table) {
					n := 0
					tb.Range(func(string, Holder) bool { n++; return true })
					if n != tb.Len() {
						panic("Range and Len disagree")
					}
				})
			}
		})
	}
	data := persist(t, f)
	for i := range 300 {
		k := fmt.Sprintf("k%d", i%7)
		f.ApplyBatch([]*raft.Log{entry(t, uint64(2*i+1), acq(k, 1)), entry(t, uint64(2*i+2), exp(k, Token(i)))})
		if i%50 == 0 {
			snap, _ := f.Snapshot()
			wg.Go(func() {
				defer snap.Release()
				if err := snap.Persist(&memSink{}); err != nil {
					panic(err)
				}
			})
		}
		if i == 150 {
			if err := restore(t, f, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
}

func TestSnapshotOfManyKeysRoundTrips(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 10_000
	}
	f := newFSM(t, 0)
	fillFSM(t, f, n)
	data := persist(t, f)
	g := newFSM(t, 0)
	if err := restore(t, g, data); err != nil {
		t.Fatal(err)
	}
	if !sameState(stateOf(t, f), stateOf(t, g)) {
		t.Fatal("restored state differs")
	}
}

// fillFSM applies n acquires of keys "lock/0000000".. in entries of 256.
func fillFSM(tb testing.TB, f *FSM, n int) {
	tb.Helper()
	cmds := make([]Command, 0, 256)
	var buf []byte
	index := f.AppliedIndex()
	for i := 0; i < n; {
		cmds = cmds[:0]
		for ; i < n && len(cmds) < 256; i++ {
			cmds = append(cmds, Command{Kind: CmdAcquire, Key: appendKey(nil, i), Lease: uint16(1 + i%MaxLease)})
		}
		var err error
		if buf, err = AppendBatch(buf[:0], cmds); err != nil {
			tb.Fatal(err)
		}
		index++
		for _, r := range results(tb, f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: buf})) {
			if r.Kind != Granted {
				tb.Fatalf("fill: %v", r.Kind)
			}
		}
	}
	if f.Len() < n {
		tb.Fatalf("Len %d < %d", f.Len(), n)
	}
}

// TestFSMHaltsOnUndecodableEntries: no entry that fails to decode is
// skipped. One from a newer latch (a rolling upgrade with the leader ahead)
// would leave this replica applying everything after it on a state that
// lacks it; a malformed one may be read by another replica (an older latch
// skipped version 1 entries with kinds it did not know, which a newer one
// could have written), and nothing on this node can tell. The FSM halts,
// keeps its state, refuses to snapshot, and resumes only from a Restore.
func TestFSMHaltsOnUndecodableEntries(t *testing.T) {
	good, _ := AppendBatch(nil, []Command{rel("a", 1), acq("c", 1)})
	newer := bytes.Clone(good)
	newer[0] = BatchVersion + 1
	v2, _ := AppendBatch(nil, []Command{extend("a", 1, 5)})
	v2plain := bytes.Clone(good) // version 2, but version 1 carries it
	v2plain[0] = batchV2
	v1extend := bytes.Clone(v2)
	v1extend[0] = batchV1
	// Grants, then an Enable of a bit this latch does not know: none applies.
	newFeature := append(bytes.Clone(good[:batchHeaderLen]), good[batchHeaderLen:]...)
	newFeature[0], newFeature[4] = batchV2, 3
	newFeature = append(newFeature, byte(CmdEnable), 0, 0, 0, 2)
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"newer version", newer, ErrBatchVersion},
		{"version 255", []byte{255}, ErrBatchVersion},
		{"nil", nil, ErrBatchMalformed},
		{"empty", []byte{}, ErrBatchMalformed},
		{"version 0", []byte{0, 0, 0, 0, 0}, ErrBatchMalformed},
		{"unknown kind in version 1", []byte{1, 0, 0, 0, 1, 99}, ErrBatchMalformed},
		{"extend in version 1", v1extend, ErrBatchMalformed},
		{"version 2 without an extend", v2plain, ErrBatchMalformed},
		{"enable of an unknown feature bit", []byte{2, 0, 0, 0, 1, byte(CmdEnable), 0x80, 0, 0, 0}, ErrBatchVersion},
		{"grants and an enable of an unknown feature bit", newFeature, ErrBatchVersion},
		{"enable in version 1", []byte{1, 0, 0, 0, 1, byte(CmdEnable), 0, 0, 0, 1}, ErrBatchMalformed},
		{"enable truncated", []byte{2, 0, 0, 0, 1, byte(CmdEnable), 0, 0, 0}, ErrBatchMalformed},
		{"truncated", good[:len(good)-1], ErrBatchMalformed},
		{"truncated version 2", v2[:len(v2)-1], ErrBatchMalformed},
		{"trailing byte", append(bytes.Clone(good), 0), ErrBatchMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFSM(t, 0)
			f.Apply(entry(t, 1, acq("a", 1)))
			want := stateOf(t, f)

			resp := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: tc.data})
			err, _ := resp.(error)
			if !errors.Is(err, ErrHalted) || !errors.Is(err, tc.want) {
				t.Fatalf("entry %x answered %v, want ErrHalted and %v", tc.data, resp, tc.want)
			}
			if !errors.Is(f.Err(), ErrHalted) || !errors.Is(f.Err(), tc.want) {
				t.Fatalf("Err() = %v", f.Err())
			}
			for i, resp := range f.ApplyBatch([]*raft.Log{entry(t, 3, acq("c", 1)), {Index: 4, Type: raft.LogConfiguration}}) {
				if err, _ := resp.(error); !errors.Is(err, ErrHalted) {
					t.Fatalf("entry %d after the halt answered %v", i, resp)
				}
			}
			if got := stateOf(t, f); !sameState(got, want) || f.AppliedIndex() != 1 {
				t.Fatalf("halted FSM changed: %v -> %v", want, got)
			}
			if _, err := f.Snapshot(); !errors.Is(err, ErrHalted) {
				t.Fatalf("Snapshot of a halted FSM: %v", err)
			}
			if _, err := f.Backup(io.Discard); !errors.Is(err, ErrHalted) {
				t.Fatalf("Backup of a halted FSM: %v", err)
			}

			// A Restore replaces the whole state and clears the halt.
			src := newFSM(t, 0)
			src.Apply(entry(t, 9, acq("x", 1), acq("y", 1)))
			if err := restore(t, f, persist(t, src)); err != nil {
				t.Fatal(err)
			}
			if f.Err() != nil || !sameState(stateOf(t, f), stateOf(t, src)) {
				t.Fatalf("after Restore: Err %v, state %v", f.Err(), stateOf(t, f))
			}
			if r := results(t, f.Apply(entry(t, 10, acq("z", 1)))); r[0].Token != 3 {
				t.Fatalf("after Restore: %+v", r)
			}
		})
	}
}

// TestFSMHaltsMidBatch: in one ApplyBatch, the entries before an
// undecodable one are applied, it and every one after answer ErrHalted,
// and AppliedIndex is the last one applied.
func TestFSMHaltsMidBatch(t *testing.T) {
	f := newFSM(t, 0)
	resps := f.ApplyBatch([]*raft.Log{
		entry(t, 1, acq("a", 1)),
		entry(t, 2, acq("a", 7)),
		{Index: 3, Type: raft.LogCommand, Data: []byte{1, 2}},
		entry(t, 4, acq("b", 1)),
		{Index: 5, Type: raft.LogConfiguration},
	})
	if r := results(t, resps[1]); r[0].Kind != Held {
		t.Fatalf("response 1: %+v", r)
	}
	for i, resp := range resps[2:] {
		if err, _ := resp.(error); !errors.Is(err, ErrHalted) {
			t.Fatalf("response %d: %v, want ErrHalted", i+2, resp)
		}
	}
	if f.AppliedIndex() != 2 || f.Len() != 1 || f.LastToken() != 1 {
		t.Fatalf("applied %d, %d keys, last %d; want 2, 1, 1", f.AppliedIndex(), f.Len(), f.LastToken())
	}
	if h, _ := f.Holder([]byte("a")); h != (Holder{Token: 1, Lease: 1}) {
		t.Fatalf("holder %+v", h)
	}
}
