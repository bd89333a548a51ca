package fsm

import (
	"errors"
	"testing"
)

func newTable(t *testing.T, floor Token) *Table {
	t.Helper()
	tb, err := NewTable(floor)
	if err != nil {
		t.Fatalf("NewTable(%d): %v", floor, err)
	}
	return tb
}

func mustAcquire(t *testing.T, tb *Table, key string, lease uint16) Token {
	t.Helper()
	tok, k, err := tb.Acquire([]byte(key), lease)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if k != key {
		t.Fatalf("Acquire(%q) returned key %q", key, k)
	}
	return tok
}

func TestGrantOrderStrictlyIncreasingAcrossKeys(t *testing.T) {
	tb := newTable(t, 0)
	var prev Token
	for i, key := range []string{"a", "b", "c", "a2", "b2"} {
		tok := mustAcquire(t, tb, key, 30)
		if tok == 0 {
			t.Fatalf("grant %d: token 0 issued", i)
		}
		if tok != prev+1 {
			t.Fatalf("grant %d: token %d after %d, want %d", i, tok, prev, prev+1)
		}
		prev = tok
	}
	// Releasing and re-acquiring never reuses a token.
	if !tb.Release([]byte("a"), 1) {
		t.Fatal("Release(a, 1) = false")
	}
	if tok := mustAcquire(t, tb, "a", 30); tok != 6 {
		t.Fatalf("re-acquire a: token %d, want 6", tok)
	}
	if got := tb.LastToken(); got != 6 {
		t.Fatalf("LastToken = %d, want 6", got)
	}
}

func TestFirstGrantIsFloorPlusOne(t *testing.T) {
	for _, floor := range []Token{0, 1, 41, 1 << 40, MaxToken - 1} {
		tb := newTable(t, floor)
		if got := tb.LastToken(); got != floor {
			t.Fatalf("floor %d: LastToken before grants = %d", floor, got)
		}
		if tok := mustAcquire(t, tb, "k", 1); tok != floor+1 {
			t.Fatalf("floor %d: first token %d, want %d", floor, tok, floor+1)
		}
	}
}

func TestZeroTableIsUsable(t *testing.T) {
	var tb Table
	if tb.Len() != 0 || tb.LastToken() != 0 || tb.Exhausted() {
		t.Fatal("zero Table is not empty with floor 0")
	}
	if _, ok := tb.Holder([]byte("k")); ok {
		t.Fatal("zero Table has a holder")
	}
	if tb.Release([]byte("k"), 1) {
		t.Fatal("zero Table released a key")
	}
	if tok := mustAcquire(t, &tb, "k", 5); tok != 1 {
		t.Fatalf("first token %d, want 1", tok)
	}
}

func TestExhaustionNearMax(t *testing.T) {
	const floor Token = 9223372036854775805
	tb := newTable(t, floor)
	if tok := mustAcquire(t, tb, "a", 10); tok != 9223372036854775806 {
		t.Fatalf("first token %d", tok)
	}
	if tb.Exhausted() {
		t.Fatal("Exhausted after one grant of two")
	}
	if tok := mustAcquire(t, tb, "b", 10); tok != 9223372036854775807 {
		t.Fatalf("second token %d, want 9223372036854775807", tok)
	}
	if !tb.Exhausted() {
		t.Fatal("not Exhausted after MaxToken was issued")
	}

	wantUnchanged := func(when string, wantLen int) {
		t.Helper()
		if tb.LastToken() != MaxToken {
			t.Fatalf("%s: LastToken = %d, want MaxToken", when, tb.LastToken())
		}
		if tb.Len() != wantLen {
			t.Fatalf("%s: Len = %d, want %d", when, tb.Len(), wantLen)
		}
	}
	expectExhausted := func(when, key string) {
		t.Helper()
		before := snapshot(tb)
		tok, k, err := tb.Acquire([]byte(key), 10)
		if !errors.Is(err, ErrTokenExhausted) {
			t.Fatalf("%s: Acquire(%q) err = %v, want ErrTokenExhausted", when, key, err)
		}
		if tok != 0 || k != "" {
			t.Fatalf("%s: Acquire(%q) = %d, %q with error", when, key, tok, k)
		}
		if after := snapshot(tb); !equalState(before, after) {
			t.Fatalf("%s: failed acquire changed the table: %v -> %v", when, before, after)
		}
	}

	expectExhausted("free key", "c")
	expectExhausted("held key", "a")
	wantUnchanged("after failed acquires", 2)

	// Forever: also after releases and expiries.
	if !tb.Release([]byte("a"), 9223372036854775806) {
		t.Fatal("release of a failed")
	}
	if !expire(tb, "b", MaxToken, 0) {
		t.Fatal("expire of b failed")
	}
	wantUnchanged("after release and expiry", 0)
	for i := 0; i < 3; i++ {
		expectExhausted("after release", "a")
		expectExhausted("after expiry", "b")
	}
	wantUnchanged("at the end", 0)
}

func TestFloorMaxToken(t *testing.T) {
	tb := newTable(t, MaxToken)
	if !tb.Exhausted() {
		t.Fatal("floor MaxToken: not Exhausted")
	}
	if _, _, err := tb.Acquire([]byte("k"), 1); !errors.Is(err, ErrTokenExhausted) {
		t.Fatalf("floor MaxToken: Acquire err = %v", err)
	}
	if tb.Len() != 0 || tb.LastToken() != MaxToken {
		t.Fatalf("floor MaxToken: Len %d LastToken %d", tb.Len(), tb.LastToken())
	}
}

func TestFloorOverflow(t *testing.T) {
	for _, floor := range []Token{MaxToken + 1, 1<<64 - 1} {
		tb, err := NewTable(floor)
		if !errors.Is(err, ErrFloorRange) || tb != nil {
			t.Fatalf("NewTable(%d) = %v, %v; want nil, ErrFloorRange", floor, tb, err)
		}
	}
}

func TestAcquireHeld(t *testing.T) {
	tb := newTable(t, 100)
	tok := mustAcquire(t, tb, "k", 30)
	got, k, err := tb.Acquire([]byte("k"), 60)
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire err = %v, want ErrHeld", err)
	}
	if got != tok || k != "" {
		t.Fatalf("second Acquire = %d, %q; want holder token %d and no key", got, k, tok)
	}
	h, ok := tb.Holder([]byte("k"))
	if !ok || h != (Holder{Token: tok, Lease: 30}) {
		t.Fatalf("Holder = %+v, %v", h, ok)
	}
	if tb.LastToken() != tok {
		t.Fatalf("failed acquire moved the counter: %d", tb.LastToken())
	}
}

func TestReleaseWrongToken(t *testing.T) {
	tb := newTable(t, 0)
	mustAcquire(t, tb, "other", 1) // token 1
	tok := mustAcquire(t, tb, "k", 7)
	for _, bad := range []Token{0, tok - 1, tok + 1, MaxToken} {
		if tb.Release([]byte("k"), bad) {
			t.Fatalf("Release with token %d (holder %d) = true", bad, tok)
		}
		if h, ok := tb.Holder([]byte("k")); !ok || h.Token != tok || h.Lease != 7 {
			t.Fatalf("after Release(%d): holder %+v, %v", bad, h, ok)
		}
	}
	if tb.Release([]byte("free"), 1) {
		t.Fatal("Release of a free key = true")
	}
	if !tb.Release([]byte("k"), tok) {
		t.Fatal("Release with the right token = false")
	}
	if tb.Release([]byte("k"), tok) {
		t.Fatal("second Release = true")
	}
	if _, ok := tb.Holder([]byte("k")); ok {
		t.Fatal("key still held after release")
	}
	if tb.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tb.Len())
	}
}

func TestExpireOnlyWhileTokenHolds(t *testing.T) {
	tb := newTable(t, 0)
	old := mustAcquire(t, tb, "k", 1)
	if !tb.Release([]byte("k"), old) {
		t.Fatal("release failed")
	}
	if expire(tb, "k", old, 0) {
		t.Fatal("Expire of a free key = true")
	}
	cur := mustAcquire(t, tb, "k", 1)
	if expire(tb, "k", old, 0) {
		t.Fatal("stale Expire freed the new holder")
	}
	if expire(tb, "k", 0, 0) {
		t.Fatal("Expire with token 0 = true")
	}
	if h, ok := tb.Holder([]byte("k")); !ok || h.Token != cur {
		t.Fatalf("holder after stale expiry: %+v, %v", h, ok)
	}
	if !expire(tb, "k", cur, 0) {
		t.Fatal("Expire with the holder's token = false")
	}
	if tb.Len() != 0 {
		t.Fatalf("Len = %d after expiry", tb.Len())
	}
}

func TestLenAndRange(t *testing.T) {
	tb := newTable(t, 0)
	want := map[string]Holder{}
	for i, key := range []string{"a", "b", "c", "d"} {
		lease := uint16(10 * (i + 1))
		want[key] = Holder{Token: mustAcquire(t, tb, key, lease), Lease: lease}
		if tb.Len() != i+1 {
			t.Fatalf("Len = %d, want %d", tb.Len(), i+1)
		}
	}
	tb.Release([]byte("b"), want["b"].Token)
	delete(want, "b")
	if got := snapshot(tb); !equalState(got, want) {
		t.Fatalf("Range saw %v, want %v", got, want)
	}
	calls := 0
	tb.Range(func(string, Holder) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("Range kept going after false: %d calls", calls)
	}
}

func TestRestore(t *testing.T) {
	src := newTable(t, 50)
	for _, key := range []string{"a", "b", "c"} {
		mustAcquire(t, src, key, 9)
	}
	src.Release([]byte("b"), 52)

	dst := newTable(t, src.LastToken())
	src.Range(func(k string, h Holder) bool {
		if err := dst.Restore(k, h); err != nil {
			t.Fatalf("Restore(%q, %+v): %v", k, h, err)
		}
		return true
	})
	if !equalState(snapshot(src), snapshot(dst)) || dst.LastToken() != src.LastToken() {
		t.Fatalf("restored %v (last %d), want %v (last %d)", snapshot(dst), dst.LastToken(), snapshot(src), src.LastToken())
	}
	if tok := mustAcquire(t, dst, "b", 1); tok != 54 {
		t.Fatalf("first grant after restore = %d, want 54", tok)
	}

	before := snapshot(dst)
	for _, c := range []struct {
		key  string
		h    Holder
		want error
	}{
		{"z", Holder{Token: 0, Lease: 1}, ErrTokenRange},
		{"z", Holder{Token: 55, Lease: 1}, ErrTokenRange},
		{"a", Holder{Token: 40, Lease: 1}, ErrHeld},
	} {
		if err := dst.Restore(c.key, c.h); !errors.Is(err, c.want) {
			t.Fatalf("Restore(%q, %+v) = %v, want %v", c.key, c.h, err, c.want)
		}
	}
	if !equalState(before, snapshot(dst)) {
		t.Fatal("failed Restore changed the table")
	}
}

func TestLookupsDoNotAllocate(t *testing.T) {
	tb := newTable(t, 0)
	for _, key := range []string{"lock/0000001", "lock/0000002", "lock/0000003"} {
		mustAcquire(t, tb, key, 30)
	}
	held := []byte("lock/0000002")
	free := []byte("lock/9999999")

	check := func(name string, fn func()) {
		t.Helper()
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
	check("Holder(held)", func() { tb.Holder(held) })
	check("Holder(free)", func() { tb.Holder(free) })
	check("Release(wrong token)", func() { tb.Release(held, 99) })
	check("Release(free)", func() { tb.Release(free, 1) })
	check("Acquire(held)", func() { tb.Acquire(held, 30) })
	check("CmdExpire(stale)", func() {
		tb.ApplyCommand(Command{Kind: CmdExpire, Key: held, Token: 99})
	})

	// A successful release deletes without allocating; re-granting the key
	// costs exactly the one key string.
	k := []byte("lock/0000004")
	var tok Token
	if n := testing.AllocsPerRun(100, func() {
		tok, _, _ = tb.Acquire(k, 30)
		if !tb.Release(k, tok) {
			panic("release failed")
		}
	}); n != 1 {
		t.Errorf("Acquire+Release: %v allocs per run, want 1 (the key string)", n)
	}
}

func snapshot(tb *Table) map[string]Holder {
	m := make(map[string]Holder, tb.Len())
	tb.Range(func(k string, h Holder) bool {
		m[k] = h
		return true
	})
	return m
}

func equalState(a, b map[string]Holder) bool {
	if len(a) != len(b) {
		return false
	}
	for k, h := range a {
		if g, ok := b[k]; !ok || g != h {
			return false
		}
	}
	return true
}

// expire is what CmdExpire does to t: frees key only if tok still holds it with extension
// count ext.
func expire(t *Table, key string, tok Token, ext uint32) bool {
	return t.ApplyCommand(Command{Kind: CmdExpire, Key: []byte(key), Token: tok, Extensions: ext}).Kind == Expired
}
