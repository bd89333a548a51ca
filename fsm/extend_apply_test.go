package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestApplyExtendTransitions walks scripted sequences of extends and
// expiries through ApplyCommand, checking each result and the state after
// each step.
func TestApplyExtendTransitions(t *testing.T) {
	type step struct {
		c    Command
		want Result
	}
	h := func(tok Token, lease uint16, n uint32) Holder { return Holder{Token: tok, Lease: lease, Extensions: n} }
	granted := func(key string, tok Token, lease uint16) Result {
		return Result{Kind: Granted, Token: tok, Holder: h(tok, lease, 0), Key: key}
	}
	extended := func(key string, tok Token, lease uint16, n uint32) Result {
		return Result{Kind: Extended, Holder: h(tok, lease, n), Key: key}
	}
	cases := []struct {
		name     string
		floor    Token
		steps    []step
		wantLast Token
		wantHeld map[string]Holder
	}{
		{
			name: "extend keeps the token, sets the lease, counts",
			steps: []step{
				{acq("k", 10), granted("k", 1, 10)},
				{extend("k", 1, 60), extended("k", 1, 60, 1)},
				{extend("k", 1, 5), extended("k", 1, 5, 2)},
				{extend("k", 1, 5), extended("k", 1, 5, 3)},
				{acq("k", 30), Result{Kind: Held, Holder: h(1, 5, 3)}},
			},
			wantLast: 1,
			wantHeld: map[string]Holder{"k": h(1, 5, 3)},
		},
		{
			name: "extend needs the holder's token",
			steps: []step{
				{extend("k", 1, 10), Result{Kind: NotHeld}},
				{acq("k", 10), granted("k", 1, 10)},
				{extend("k", 0, 10), Result{Kind: NotHeld, Holder: h(1, 10, 0)}},
				{extend("k", 2, 10), Result{Kind: NotHeld, Holder: h(1, 10, 0)}},
				{extend("other", 1, 10), Result{Kind: NotHeld}},
				{extend("k", 1, 20), extended("k", 1, 20, 1)},
				{rel("k", 1), Result{Kind: Released, Holder: h(1, 20, 1)}},
				{extend("k", 1, 10), Result{Kind: NotHeld}},
				{acq("k", 3), granted("k", 2, 3)},
				{extend("k", 1, 10), Result{Kind: NotHeld, Holder: h(2, 3, 0)}},
			},
			wantLast: 2,
			wantHeld: map[string]Holder{"k": h(2, 3, 0)},
		},
		{
			name: "expire must match the extension count",
			steps: []step{
				{acq("k", 10), granted("k", 1, 10)},
				{extend("k", 1, 20), extended("k", 1, 20, 1)},
				{exp("k", 1), Result{Kind: Stale, Holder: h(1, 20, 1)}},
				{expN("k", 1, 0), Result{Kind: Stale, Holder: h(1, 20, 1)}},
				{expN("k", 1, 2), Result{Kind: Stale, Holder: h(1, 20, 1)}},
				{expN("k", 2, 1), Result{Kind: Stale, Holder: h(1, 20, 1)}},
				{expN("k", 0, 1), Result{Kind: Stale, Holder: h(1, 20, 1)}},
				{expN("k", 1, 1), Result{Kind: Expired, Holder: h(1, 20, 1)}},
				{expN("k", 1, 1), Result{Kind: Stale}},
			},
			wantLast: 1,
			wantHeld: map[string]Holder{},
		},
		{
			// The leader proposed Expire(k, 1) for the first deadline while
			// the holder's Extend was on its way; the Extend commits first.
			name: "an expire for the lease before an extend keeps the lock",
			steps: []step{
				{acq("k", 10), granted("k", 1, 10)},
				{extend("k", 1, 30), extended("k", 1, 30, 1)},
				{expN("k", 1, 0), Result{Kind: Stale, Holder: h(1, 30, 1)}},
				{acq("k", 10), Result{Kind: Held, Holder: h(1, 30, 1)}},
				{extend("k", 1, 30), extended("k", 1, 30, 2)},
				{expN("k", 1, 1), Result{Kind: Stale, Holder: h(1, 30, 2)}},
				{expN("k", 1, 2), Result{Kind: Expired, Holder: h(1, 30, 2)}},
				{acq("k", 7), granted("k", 2, 7)},
				{expN("k", 2, 0), Result{Kind: Expired, Holder: h(2, 7, 0)}},
			},
			wantLast: 2,
			wantHeld: map[string]Holder{},
		},
		{
			// The expiry commits first (and the key goes to its next waiter
			// in the same entry): the holder's Extend is answered not held.
			name: "extend of a key being expired",
			steps: []step{
				{acq("k", 10), granted("k", 1, 10)},
				{exp("k", 1), Result{Kind: Expired, Holder: h(1, 10, 0)}},
				{extend("k", 1, 30), Result{Kind: NotHeld}},
				{acq("k", 20), granted("k", 2, 20)},
				{exp("k", 2), Result{Kind: Expired, Holder: h(2, 20, 0)}},
				{acq("k", 5), granted("k", 3, 5)},
				{extend("k", 2, 30), Result{Kind: NotHeld, Holder: h(3, 5, 0)}},
			},
			wantLast: 3,
			wantHeld: map[string]Holder{"k": h(3, 5, 0)},
		},
		{
			name: "release needs no count",
			steps: []step{
				{acq("k", 10), granted("k", 1, 10)},
				{extend("k", 1, 10), extended("k", 1, 10, 1)},
				{rel("k", 2), Result{Kind: NotHeld, Holder: h(1, 10, 1)}},
				{rel("k", 1), Result{Kind: Released, Holder: h(1, 10, 1)}},
			},
			wantLast: 1,
			wantHeld: map[string]Holder{},
		},
		{
			name:  "an exhausted counter still extends",
			floor: MaxToken - 1,
			steps: []step{
				{acq("a", 1), granted("a", MaxToken, 1)},
				{acq("b", 1), Result{Kind: Exhausted}},
				{extend("a", MaxToken, 9), extended("a", MaxToken, 9, 1)},
				{expN("a", MaxToken, 1), Result{Kind: Expired, Holder: h(MaxToken, 9, 1)}},
			},
			wantLast: MaxToken,
			wantHeld: map[string]Holder{},
		},
		{
			name: "invalid extends change nothing",
			steps: []step{
				{acq("a", 1), granted("a", 1, 1)},
				{extend("a", 1, 0), Result{Kind: Invalid}},
				{extend("a", 1, MaxLease+1), Result{Kind: Invalid}},
				{extend("", 1, 1), Result{Kind: Invalid}},
				{extend(string(key128)+"x", 1, 1), Result{Kind: Invalid}},
				{extend("a", 1, MaxLease), extended("a", 1, MaxLease, 1)},
			},
			wantLast: 1,
			wantHeld: map[string]Holder{"a": h(1, MaxLease, 1)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, tc.floor)
			for i, s := range tc.steps {
				if got := tb.ApplyCommand(s.c); got != s.want {
					t.Fatalf("step %d %v(%q, lease %d, token %d, count %d) = %+v, want %+v",
						i, s.c.Kind, s.c.Key, s.c.Lease, s.c.Token, s.c.Extensions, got, s.want)
				}
			}
			if got := snapshot(tb); !equalState(got, tc.wantHeld) || tb.LastToken() != tc.wantLast {
				t.Fatalf("state %v last %d, want %v last %d", got, tb.LastToken(), tc.wantHeld, tc.wantLast)
			}
		})
	}
}

// TestExtendLimit: the count never wraps. At MaxExtensions an Extend
// changes nothing (not even the lease) and says so; the holder can still be
// released or expired for that count.
func TestExtendLimit(t *testing.T) {
	tb := newTable(t, 5)
	if err := tb.Restore("k", Holder{Token: 5, Lease: 10, Extensions: MaxExtensions - 1}); err != nil {
		t.Fatal(err)
	}
	at := Holder{Token: 5, Lease: 20, Extensions: MaxExtensions}
	if r := tb.ApplyCommand(extend("k", 5, 20)); r != (Result{Kind: Extended, Holder: at, Key: "k"}) {
		t.Fatalf("extend to the limit: %+v", r)
	}
	for range 3 {
		if r := tb.ApplyCommand(extend("k", 5, 30)); r != (Result{Kind: ExtendLimit, Holder: at}) {
			t.Fatalf("extend past the limit: %+v", r)
		}
		if h, _ := tb.Holder([]byte("k")); h != at {
			t.Fatalf("extend past the limit changed the holder: %+v", h)
		}
	}
	if h, k, err := tb.Extend([]byte("k"), 5, 30); !errors.Is(err, ErrExtendLimit) || h != at || k != "" {
		t.Fatalf("Table.Extend past the limit = %+v, %q, %v", h, k, err)
	}
	if r := tb.ApplyCommand(extend("k", 4, 30)); r.Kind != NotHeld {
		t.Fatalf("wrong token at the limit: %+v", r)
	}
	if r := tb.ApplyCommand(expN("k", 5, 0)); r.Kind != Stale {
		t.Fatalf("expire for count 0 at the limit: %+v", r)
	}
	if r := tb.ApplyCommand(expN("k", 5, MaxExtensions)); r != (Result{Kind: Expired, Holder: at}) {
		t.Fatalf("expire at the limit: %+v", r)
	}
}

func TestTableExtendErrors(t *testing.T) {
	tb := newTable(t, 0)
	if h, k, err := tb.Extend([]byte("k"), 1, 5); !errors.Is(err, ErrNotHeld) || h != (Holder{}) || k != "" {
		t.Fatalf("Extend of a free key = %+v, %q, %v", h, k, err)
	}
	tok := mustAcquire(t, tb, "k", 7)
	for _, bad := range []Token{0, tok + 1, MaxToken} {
		if h, k, err := tb.Extend([]byte("k"), bad, 5); !errors.Is(err, ErrNotHeld) || h != (Holder{Token: tok, Lease: 7}) || k != "" {
			t.Fatalf("Extend with token %d = %+v, %q, %v", bad, h, k, err)
		}
	}
	h, k, err := tb.Extend([]byte("k"), tok, 9)
	if err != nil || h != (Holder{Token: tok, Lease: 9, Extensions: 1}) || k != "k" {
		t.Fatalf("Extend = %+v, %q, %v", h, k, err)
	}
	if expire(tb, "k", tok, 0) || !expire(tb, "k", tok, 1) || tb.Len() != 0 {
		t.Fatal("Expire did not go by the extension count")
	}
}

func TestApplyExtendAllocations(t *testing.T) {
	tb := newTable(t, 0)
	tb.ApplyCommand(acq("lock/0000001", 30))
	for name, c := range map[string]Command{
		"extend wrong token": extend("lock/0000001", 9, 30),
		"extend free":        extend("lock/0000002", 1, 30),
		"expire stale count": expN("lock/0000001", 1, 99),
	} {
		if n := testing.AllocsPerRun(100, func() { tb.ApplyCommand(c) }); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
	c := extend("lock/0000001", 1, 30)
	if n := testing.AllocsPerRun(100, func() {
		if tb.ApplyCommand(c).Kind != Extended {
			panic("extend failed")
		}
	}); n != 1 {
		t.Errorf("extend: %v allocs per run, want 1 (the key string the map stores)", n)
	}
}

// TestExtendedLeaseSurvivesRestore: the extended lease and its count are
// in the snapshot, so a node that restores it (a new leader rebuilding
// its deadlines from Table.Range) restarts the extended lease, and an
// expiry made for the first lease stays stale there.
func TestExtendedLeaseSurvivesRestore(t *testing.T) {
	src := newFSM(t, 0)
	src.Apply(entry(t, 1, acq("k", 10), acq("plain", 20)))
	src.Apply(entry(t, 2, extend("k", 1, 300), extend("k", 1, 600)))
	data := persist(t, src)
	if data[8] != snapshotV2 {
		t.Fatalf("snapshot version %d, want 2", data[8])
	}
	dst := newFSM(t, 0)
	if err := restore(t, dst, data); err != nil {
		t.Fatal(err)
	}
	if !sameState(stateOf(t, dst), stateOf(t, src)) {
		t.Fatal("restored state differs")
	}
	leases := map[string]Holder{}
	dst.Read(func(tb *Table) { leases = snapshot(tb) })
	if leases["k"] != (Holder{Token: 1, Lease: 600, Extensions: 2}) || leases["plain"] != (Holder{Token: 2, Lease: 20}) {
		t.Fatalf("restored holders %v", leases)
	}
	for _, f := range []*FSM{src, dst} {
		r := results(t, f.Apply(entry(t, 3, exp("k", 1), expN("k", 1, 1), expN("k", 1, 2), exp("plain", 2))))
		if r[0].Kind != Stale || r[1].Kind != Stale || r[2].Kind != Expired || r[3].Kind != Expired {
			t.Fatalf("expiries after restore: %+v", r)
		}
	}
	if !bytes.Equal(persist(t, src), persist(t, dst)) {
		t.Fatal("source and restored replica diverged")
	}
}

// TestExtendEntryFromFSM: Extend through FSM.Apply, as raft delivers it.
func TestExtendEntryFromFSM(t *testing.T) {
	f := newFSM(t, 0)
	f.Apply(entry(t, 1, acq("k", 10)))
	l := entry(t, 2, extend("k", 1, 40), expN("k", 1, 0), extend("k", 2, 40))
	if l.Data[0] != batchV2 {
		t.Fatalf("entry version %d, want 2", l.Data[0])
	}
	r := results(t, f.Apply(l))
	want := []Result{
		{Kind: Extended, Holder: Holder{Token: 1, Lease: 40, Extensions: 1}, Key: "k"},
		{Kind: Stale, Holder: Holder{Token: 1, Lease: 40, Extensions: 1}},
		{Kind: NotHeld, Holder: Holder{Token: 1, Lease: 40, Extensions: 1}},
	}
	for i := range want {
		if r[i] != want[i] {
			t.Fatalf("result %d = %+v, want %+v", i, r[i], want[i])
		}
	}
	for i := range l.Data {
		l.Data[i] = 0 // the extended key must not alias the entry
	}
	if h, ok := f.Holder([]byte("k")); !ok || h.Lease != 40 || r[0].Key != "k" {
		t.Fatalf("holder %+v, %v after the entry was wiped; key %q", h, ok, r[0].Key)
	}
	if resp := f.Apply(&raft.Log{Index: 3, Type: raft.LogConfiguration}); resp != nil || f.AppliedIndex() != 3 {
		t.Fatalf("configuration entry: %v, applied %d", resp, f.AppliedIndex())
	}
}
