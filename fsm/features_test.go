package fsm

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster/clustertest"
)

func enable(f Features) Command { return Command{Kind: CmdEnable, Features: f} }

func TestFeaturesString(t *testing.T) {
	for f, want := range map[Features]string{
		0:                    "none",
		FeatureLeases:        "leases",
		FeatureLeases | 1<<1: "leases|0x2",
		1 << 31:              "0x80000000",
		^Features(0):         "leases|0xfffffffe",
		Features(6):          "0x6",
	} {
		if got := f.String(); got != want {
			t.Errorf("Features(%#x).String() = %q, want %q", uint32(f), got, want)
		}
	}
	if CmdEnable.String() != "enable" || Enabled.String() != "enabled" {
		t.Errorf("names %q, %q", CmdEnable.String(), Enabled.String())
	}
	if !FeatureLeases.Has(FeatureLeases) || !FeatureLeases.Has(0) || Features(0).Has(FeatureLeases) || FeatureLeases.Has(FeatureLeases|1<<1) {
		t.Error("Has")
	}
}

// TestKnownFeaturesNamed: every known bit has a name, and no unknown bit
// does, so String and KnownFeatures cannot drift apart.
func TestKnownFeaturesNamed(t *testing.T) {
	for i := range 32 {
		named := i < len(featureNames) && featureNames[i] != ""
		if known := KnownFeatures&(1<<i) != 0; known != named {
			t.Errorf("bit %d: known %v, named %v", i, known, named)
		}
	}
}

// TestEnableLayout pins the bytes of an Enable: kind 6, then features u32,
// in batch version 2 only.
func TestEnableLayout(t *testing.T) {
	for _, tc := range []struct {
		cmds []Command
		want string
	}{
		{[]Command{enable(FeatureLeases)}, "02" + "00000001" + "06" + "00000001"},
		{[]Command{{Kind: CmdEnable, Features: FeatureLeases, Key: []byte("ignored"), Lease: 9, Token: 9, Extensions: 9}},
			"02" + "00000001" + "06" + "00000001"},
		{[]Command{enable(0)}, "02" + "00000001" + "06" + "00000000"},
		{[]Command{acq("k", 30), enable(FeatureLeases), flr(2)},
			"02" + "00000003" + "01016b001e" + "06" + "00000001" + "04" + "0000000000000002"},
	} {
		b, err := AppendBatch(nil, tc.cmds)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b); got != tc.want {
			t.Fatalf("layout of %+v\n got %s\nwant %s", tc.cmds, got, tc.want)
		}
	}
	if v := enable(FeatureLeases).MinBatchVersion(); v != batchV2 {
		t.Fatalf("MinBatchVersion of an enable = %d, want 2", v)
	}
	if v := enable(0).MinBatchVersion(); v != batchV2 {
		t.Fatalf("MinBatchVersion of an invalid enable = %d, want 2", v)
	}
}

func TestEnableRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmds []Command
	}{
		{"enable leases", []Command{enable(FeatureLeases)}},
		{"enable nothing (invalid, encodable)", []Command{enable(0)}},
		{"enable twice", []Command{enable(FeatureLeases), enable(FeatureLeases)}},
		{"unused fields are dropped", []Command{
			{Kind: CmdEnable, Features: FeatureLeases, Key: []byte("a"), Lease: 5, Token: 1, Extensions: 7},
			{Kind: CmdAcquire, Key: []byte("a"), Lease: 5, Features: FeatureLeases},
			{Kind: CmdFloor, Token: 3, Features: 1 << 9},
		}},
		{"between extends and expiries", []Command{
			acq("q", 5), extend("q", 1, 60), enable(FeatureLeases), expN("q", 1, 1), acq("r", 1),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := AppendBatch(nil, tc.cmds)
			if err != nil {
				t.Fatal(err)
			}
			if data[0] != batchV2 {
				t.Fatalf("version %d, want 2", data[0])
			}
			got, err := DecodeBatch(data, nil)
			if err != nil || len(got) != len(tc.cmds) {
				t.Fatalf("DecodeBatch(%x) = %d commands, %v", data, len(got), err)
			}
			for i := range got {
				if want := canonical(tc.cmds[i]); !sameCommand(got[i], want) {
					t.Errorf("command %d = %+v, want %+v", i, got[i], want)
				}
			}
			if again, err := AppendBatch(nil, got); err != nil || !bytes.Equal(again, data) {
				t.Fatalf("re-encode = %x, %v; want %x", again, err, data)
			}
		})
	}
}

// TestDecodeEnableRejects: an Enable in version 1 and a truncated one are
// malformed; one of a bit this latch does not know is an entry from a newer
// latch (ErrBatchVersion), wherever it is in the batch. Either way nothing
// of the batch is decoded.
func TestDecodeEnableRejects(t *testing.T) {
	mk := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"enable in version 1", mk("0100000001" + "06" + "00000001"), ErrBatchMalformed},
		{"enable in version 1 after a grant", mk("0100000002" + "01016b001e" + "06" + "00000001"), ErrBatchMalformed},
		{"enable without features", mk("0200000001" + "06"), ErrBatchMalformed},
		{"enable features truncated", mk("0200000001" + "06" + "000000"), ErrBatchMalformed},
		{"enable and a trailing byte", mk("0200000001" + "06" + "00000001" + "00"), ErrBatchMalformed},
		{"enable of every bit", mk("0200000001" + "06" + "ffffffff"), ErrBatchVersion},
		{"enable of a known and an unknown bit", mk("0200000001" + "06" + "00000003"), ErrBatchVersion},
		{"enable of an unknown bit after grants", mk("0200000003" + "01016b001e" + "01016c001e" + "06" + "80000000"), ErrBatchVersion},
	}
	for bit := 1; bit < 32; bit++ {
		cases = append(cases, struct {
			name string
			data []byte
			want error
		}{fmt.Sprintf("enable of bit %d", bit), mk(fmt.Sprintf("0200000001"+"06"+"%08x", uint32(1)<<bit)), ErrBatchVersion})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBatch(tc.data, []Command{flr(9)})
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeBatch(%x) err = %v, want %v", tc.data, err, tc.want)
			}
			if len(got) != 1 || got[0].Token != 9 {
				t.Fatalf("failed decode changed dst: %+v", got)
			}
			for i, c := range got[1:cap(got)] {
				if c.Key != nil || c.Kind != 0 {
					t.Fatalf("failed decode left command %d in dst's spare capacity: %+v", i+1, c)
				}
			}
		})
	}
	valid := mk("0200000001" + "06" + "00000001")
	for n := range len(valid) {
		if _, err := DecodeBatch(valid[:n], nil); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
}

func TestValidateEnable(t *testing.T) {
	for _, tc := range []struct {
		f  Features
		ok bool
	}{
		{FeatureLeases, true},
		{KnownFeatures, true},
		{0, false},
		{1 << 1, false},
		{FeatureLeases | 1<<31, false},
		{^Features(0), false},
	} {
		err := enable(tc.f).Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidCommand)) {
			t.Errorf("Validate(enable %v) = %v, want ok=%v", tc.f, err, tc.ok)
		}
	}
}

// TestApplyEnable: one-way and idempotent. An Enable ORs its bits in and
// answers the set afterwards; no command turns a bit off; an invalid Enable
// changes nothing.
func TestApplyEnable(t *testing.T) {
	tb := newTable(t, 0)
	if tb.Features() != 0 {
		t.Fatalf("new table has features %v", tb.Features())
	}
	var zero Table
	if zero.Features() != 0 || zero.ApplyCommand(enable(FeatureLeases)).Features != FeatureLeases || zero.Features() != FeatureLeases {
		t.Fatal("the zero Table does not enable")
	}
	steps := []struct {
		c    Command
		want Result
	}{
		{enable(0), Result{Kind: Invalid}},
		{enable(1 << 1), Result{Kind: Invalid}},
		{enable(FeatureLeases | 1<<5), Result{Kind: Invalid}},
		{acq("k", 10), Result{Kind: Granted, Token: 1, Holder: Holder{Token: 1, Lease: 10}, Key: "k"}},
		{enable(FeatureLeases), Result{Kind: Enabled, Features: FeatureLeases}},
		{enable(FeatureLeases), Result{Kind: Enabled, Features: FeatureLeases}},
		{enable(0), Result{Kind: Invalid}},
		{enable(1 << 1), Result{Kind: Invalid}},
		{extend("k", 1, 20), Result{Kind: Extended, Holder: Holder{Token: 1, Lease: 20, Extensions: 1}, Key: "k"}},
		{expN("k", 1, 1), Result{Kind: Expired, Holder: Holder{Token: 1, Lease: 20, Extensions: 1}}},
		{flr(MaxToken), Result{Kind: Floored, Token: MaxToken}},
		{acq("k", 1), Result{Kind: Exhausted}},
		{enable(KnownFeatures), Result{Kind: Enabled, Features: KnownFeatures}},
	}
	wantAfter := Features(0)
	for i, s := range steps {
		if got := tb.ApplyCommand(s.c); got != s.want {
			t.Fatalf("step %d %v %v = %+v, want %+v", i, s.c.Kind, s.c.Features, got, s.want)
		}
		if s.want.Kind == Enabled {
			wantAfter = s.want.Features
		}
		if tb.Features() != wantAfter {
			t.Fatalf("step %d: features %v, want %v", i, tb.Features(), wantAfter)
		}
	}
}

// TestFeaturesChangeNoTransition: the feature set is a record for the node;
// every other command answers the same with or without it, so a log
// written before the switch replays as it applied.
func TestFeaturesChangeNoTransition(t *testing.T) {
	script := []Command{
		acq("a", 10), extend("a", 1, 20), extend("a", 2, 20), expN("a", 1, 0), acq("b", 5),
		rel("b", 2), extend("b", 2, 5), expN("a", 1, 1), flr(40), acq("a", 1), extend("a", 41, 0),
	}
	plain, featured := newTable(t, 0), enabled(t, newTable(t, 0), FeatureLeases)
	for i, c := range script {
		if a, b := plain.ApplyCommand(c), featured.ApplyCommand(c); a != b {
			t.Fatalf("command %d %v: %+v without features, %+v with", i, c.Kind, a, b)
		}
	}
	if !equalState(snapshot(plain), snapshot(featured)) || plain.LastToken() != featured.LastToken() {
		t.Fatal("states differ")
	}
}

func TestApplyEnableAllocations(t *testing.T) {
	tb := newTable(t, 0)
	for name, c := range map[string]Command{
		"enable":         enable(FeatureLeases),
		"enable nothing": enable(0),
		"enable unknown": enable(1 << 3),
	} {
		if n := testing.AllocsPerRun(100, func() { tb.ApplyCommand(c) }); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
}

// TestEnableEntryFromFSM: an Enable through FSM.Apply, as raft delivers it,
// is readable through Features and Read; a replica that replays the same
// entries has the same set.
func TestEnableEntryFromFSM(t *testing.T) {
	f := newFSM(t, 0)
	logs := []*raft.Log{
		entry(t, 1, acq("k", 10)),
		entry(t, 2, enable(FeatureLeases), extend("k", 1, 30)),
		{Index: 3, Type: raft.LogConfiguration},
		entry(t, 4, enable(FeatureLeases), enable(0)),
	}
	if f.Apply(logs[0]); f.Features() != 0 {
		t.Fatalf("features %v before any enable", f.Features())
	}
	r := results(t, f.Apply(logs[1]))
	if r[0] != (Result{Kind: Enabled, Features: FeatureLeases}) || r[1].Kind != Extended {
		t.Fatalf("results %+v", r)
	}
	f.Apply(logs[2])
	r = results(t, f.Apply(logs[3]))
	if r[0] != (Result{Kind: Enabled, Features: FeatureLeases}) || r[1].Kind != Invalid {
		t.Fatalf("results %+v", r)
	}
	var read Features
	f.Read(func(tb *Table) { read = tb.Features() })
	if f.Features() != FeatureLeases || read != FeatureLeases {
		t.Fatalf("Features %v, Read %v", f.Features(), read)
	}
	g := newFSM(t, 0)
	if err := sameResponses(g.ApplyBatch(logs), []any{
		[]Result{{Kind: Granted, Token: 1, Holder: Holder{Token: 1, Lease: 10}, Key: "k"}},
		[]Result{{Kind: Enabled, Features: FeatureLeases}, {Kind: Extended, Holder: Holder{Token: 1, Lease: 30, Extensions: 1}, Key: "k"}},
		nil,
		[]Result{{Kind: Enabled, Features: FeatureLeases}, {Kind: Invalid}},
	}); err != nil {
		t.Fatal(err)
	}
	if !sameState(stateOf(t, g), stateOf(t, f)) {
		t.Fatal("replayed replica differs")
	}
}

// TestFSMHaltsOnNewFeature: an Enable of a bit this latch does not know,
// even next to one it knows, halts the FSM (never skipped, never applied in
// part): the features stay as the entries before it left them, and nothing
// after it applies.
func TestFSMHaltsOnNewFeature(t *testing.T) {
	f := newFSM(t, 0)
	f.Apply(entry(t, 1, acq("a", 1), enable(FeatureLeases)))
	want := stateOf(t, f)
	bad := []byte{2, 0, 0, 0, 2, byte(CmdAcquire), 1, 'b', 0, 1, byte(CmdEnable), 0, 0, 0, 3}
	resps := f.ApplyBatch([]*raft.Log{
		{Index: 2, Type: raft.LogCommand, Data: bad},
		entry(t, 3, acq("c", 1)),
	})
	for i, resp := range resps {
		if err, _ := resp.(error); !errors.Is(err, ErrHalted) || !errors.Is(err, ErrBatchVersion) {
			t.Fatalf("response %d = %v, want ErrHalted and ErrBatchVersion", i, resp)
		}
	}
	if !errors.Is(f.Err(), ErrBatchVersion) || f.Features() != FeatureLeases || f.AppliedIndex() != 1 {
		t.Fatalf("Err %v, features %v, applied %d", f.Err(), f.Features(), f.AppliedIndex())
	}
	if got := stateOf(t, f); !sameState(got, want) {
		t.Fatalf("halted FSM changed: %v -> %v", want, got)
	}
}

// TestSnapshotJSONInfo: a description of a snapshot without features reads
// as it always did; with features it says which.
func TestSnapshotJSONInfo(t *testing.T) {
	for info, want := range map[SnapshotInfo]string{
		{Index: 3, LastToken: 2, Keys: 1}:                          `{"index":3,"last_token":2,"keys":1}`,
		{Index: 3, LastToken: 2, Keys: 1, Features: FeatureLeases}: `{"index":3,"last_token":2,"keys":1,"features":1}`,
	} {
		b, err := json.Marshal(info)
		if err != nil || string(b) != want {
			t.Errorf("json of %+v = %s, %v; want %s", info, b, err, want)
		}
	}
}

// TestRaftClusterFeatures: an Enable committed through raft is readable on
// every replica: applied from the log, replayed by a follower restarted
// with a fresh FSM, and restored from the snapshot a node added later is
// sent. It is one-way and idempotent there too.
func TestRaftClusterFeatures(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	nodes := newTestCluster(t, 3)
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	leader := leaderOf(t, nodes)
	features := func(want Features) {
		t.Helper()
		converged(t, leader, nodes)
		for _, n := range nodes {
			var read Features
			n.fsm.Read(func(tb *Table) { read = tb.Features() })
			if got := n.fsm.Features(); got != want || read != want {
				t.Fatalf("%s: Features %v, Read %v; want %v", n.id, got, read, want)
			}
		}
	}

	wantKinds(t, propose(t, leader, acq("a", 10), extend("a", 1, 20)), Granted, Extended)
	features(0)
	res := propose(t, leader, enable(FeatureLeases), acq("b", 5), enable(0))
	if res[0] != (Result{Kind: Enabled, Features: FeatureLeases}) || res[2].Kind != Invalid {
		t.Fatalf("results %+v", res)
	}
	features(FeatureLeases)
	if r := propose(t, leader, enable(FeatureLeases)); r[0] != (Result{Kind: Enabled, Features: FeatureLeases}) {
		t.Fatalf("enable again: %+v", r)
	}
	features(FeatureLeases)

	// A follower restarted with a fresh FSM before any snapshot replays the
	// Enable from the log.
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	follower.stop(t)
	wantKinds(t, propose(t, leader, acq("while-down", 1)), Granted)
	follower.start(t)
	features(FeatureLeases)
	if follower.restores.Load() != 0 {
		t.Fatalf("%s restored a snapshot; it should have replayed the log", follower.id)
	}

	// A node added after the log was truncated restores the features from
	// the leader's snapshot, written in version 3.
	for _, n := range nodes {
		if err := n.r.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot %s: %v", n.id, err)
		}
	}
	for i := range 5 {
		propose(t, leader, acq(fmt.Sprintf("after-snap/%d", i), 7))
	}
	n4 := newTestNode(t, nodes[0].net, 3)
	n4.start(t)
	nodes = append(nodes, n4)
	if err := leader.r.AddVoter(n4.id, n4.addr, 0, clustertest.Bound).Error(); err != nil {
		t.Fatalf("AddVoter: %v", err)
	}
	wantKinds(t, propose(t, leader, acq("after-join", 1)), Granted)
	features(FeatureLeases)
	if n4.restores.Load() != 1 {
		t.Fatalf("%s restored %d snapshots, want the one it was sent", n4.id, n4.restores.Load())
	}
	if v := persist(t, leader.fsm)[8]; v != snapshotV3 {
		t.Fatalf("snapshot version %d with features on, want 3", v)
	}
}
