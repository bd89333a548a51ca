package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/wire"
)

// locksOf calls Locks and returns what done got; done must have been called before Locks
// returned (single mode) unless log is set, whose confirmations are then answered nil.
func locksOf(t *testing.T, h *harness, log *fakeLog, prefix, after string, limit int) (LocksPage, error) {
	t.Helper()
	var got *LocksPage
	var gerr error
	h.n.Locks(prefix, after, limit, func(p LocksPage, err error) { got, gerr = &p, err })
	if log != nil && got == nil {
		log.confirmAll(nil)
	}
	if got == nil {
		t.Fatal("Locks did not answer")
	}
	return *got, gerr
}

// Pages of held keys under a prefix, in byte order, each with its token, lease left and
// waiters, and a cursor that ends at the last page; other prefixes are left out.
func TestLocksPagesInKeyOrder(t *testing.T) {
	h := newHarness(t, nil)
	c, r := h.conn()
	for i := 24; i >= 0; i-- { // granted in reverse: the order is the keys', not the grants'
		h.acquire(c, uint64(i+1), fmt.Sprintf("a/%02d", i), 0, 30)
	}
	h.acquire(c, 100, "b/x", 0, 30)
	h.acquire(c, 101, "a/03", 10, 30) // a waiter
	r.take()
	h.clock.Advance(5 * time.Second)
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		p, err := locksOf(t, h, nil, "a/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if p.Held != 26 {
			t.Fatalf("held %d, want 26", p.Held)
		}
		for _, l := range p.Locks {
			keys = append(keys, l.Key)
			if !l.Held || l.Token == 0 || l.LeaseLeft != 25*time.Second || l.Releasing {
				t.Fatalf("lock %+v: want held, with a token and 25 s left", l)
			}
			if want := 0; l.Key == "a/03" && l.Waiters != 1 || l.Key != "a/03" && l.Waiters != want {
				t.Fatalf("lock %+v: waiters", l)
			}
		}
		if p.Next == "" {
			if pages != 2 || len(p.Locks) != 5 {
				t.Fatalf("last page %d had %d keys, want page 2 with 5", pages, len(p.Locks))
			}
			break
		}
		if len(p.Locks) != 10 || p.Next != p.Locks[9].Key {
			t.Fatalf("page %d: %d keys, next %q", pages, len(p.Locks), p.Next)
		}
		after = p.Next
	}
	if len(keys) != 25 || keys[0] != "a/00" || keys[24] != "a/24" {
		t.Fatalf("keys %v", keys)
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("keys out of order: %v", keys)
		}
	}
}

// One key: free, or held with its holder and waiters.
func TestLockShowsOneKey(t *testing.T) {
	h := newHarness(t, nil)
	c, r := h.conn()
	var info LockInfo
	h.n.Lock("k", func(l LockInfo, err error) { info = l })
	if info.Key != "k" || info.Held {
		t.Fatalf("free key: %+v", info)
	}
	h.acquire(c, 1, "k", 0, 30)
	tok := want(t, r.one(t), wire.OpAcquire, 1).Token
	h.acquire(c, 2, "k", 5, 30)
	h.acquire(c, 3, "k", 5, 30)
	h.n.Lock("k", func(l LockInfo, err error) { info = l })
	if !info.Held || info.Token != tok || info.Waiters != 2 || info.LeaseLeft != 30*time.Second {
		t.Fatalf("held key: %+v", info)
	}
}

// A forced release frees the holder through the same path as its own release: the next
// waiter is granted; a token that no longer holds, and a free key, are refused with
// ErrNotHeld naming why; the holder's own release afterwards is N.
func TestForceReleaseFreesAndHandsOn(t *testing.T) {
	h := newHarness(t, nil)
	a, ra := h.conn()
	b, rb := h.conn()
	h.acquire(a, 1, "k", 0, 3600)
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token
	h.acquire(b, 2, "k", 30, 30)
	force := func(token uint64) (uint64, error) {
		var freed uint64
		var ferr error
		called := false
		h.n.ForceRelease([]byte("k"), token, func(f uint64, err error) { freed, ferr, called = f, err, true })
		if !called {
			t.Fatal("ForceRelease did not answer")
		}
		return freed, ferr
	}
	if _, err := force(tok + 5); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), fmt.Sprint(tok)) {
		t.Fatalf("force release of another token: %v, want ErrNotHeld naming holder %d", err, tok)
	}
	freed, err := force(0)
	if err != nil || freed != tok {
		t.Fatalf("force release: freed %d, %v; want %d", freed, err, tok)
	}
	tok2 := want(t, rb.one(t), wire.OpAcquire, 2).Token
	if tok2 <= tok {
		t.Fatalf("waiter got %d after %d", tok2, tok)
	}
	h.n.Release(a, 3, []byte("k"), tok)
	want(t, ra.one(t), wire.OpNotHeld, 3)
	if _, err := force(tok); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("force release of the old token: %v", err)
	}
	h.n.Release(b, 4, []byte("k"), tok2)
	want(t, rb.one(t), wire.OpRelease, 4)
	if _, err := force(0); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "free") {
		t.Fatalf("force release of a free key: %v", err)
	}
}

// In cluster mode the reads and a refused forced release answer only once leadership is
// confirmed, and not at all on a follower or after a failed confirmation; the forced
// release itself is an entry whose result answers.
func TestInspectionInClusterModeIsLinearizable(t *testing.T) {
	h, log := newReplicated(t)
	if _, err := locksOf(t, h, nil, "", "", 10); !errors.Is(err, outcome.NotLeader) {
		t.Fatalf("Locks on a follower: %v", err)
	}
	h.n.Lead()
	a, ra := h.conn()
	h.acquire(a, 1, "k", 0, 30)
	log.commit()
	tok := want(t, ra.one(t), wire.OpAcquire, 1).Token

	called := false
	h.n.Locks("", "", 10, func(LocksPage, error) { called = true })
	if called {
		t.Fatal("Locks answered before leadership was confirmed")
	}
	log.confirmAll(errDeposedForTest)
	if !called {
		t.Fatal("Locks did not answer after the confirmation")
	}
	p, err := locksOf(t, h, log, "", "", 10)
	if err != nil || len(p.Locks) != 1 || p.Locks[0].Token != tok {
		t.Fatalf("Locks: %+v, %v", p, err)
	}

	var freed uint64
	var ferr error
	done := false
	h.n.ForceRelease([]byte("k"), tok, func(f uint64, err error) { freed, ferr, done = f, err, true })
	if done {
		t.Fatal("a forced release answered before its entry")
	}
	if cmds := log.commit(); len(cmds) != 1 {
		t.Fatalf("entries %s", kinds(cmds))
	}
	if !done || ferr != nil || freed != tok {
		t.Fatalf("forced release: %d, %v", freed, ferr)
	}
}

// The audit trail: one line per grant, release, expiry and forced release, with key, token,
// lease, result and origin.
func TestAuditTrail(t *testing.T) {
	var buf bytes.Buffer
	audit := hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true, Level: hclog.Info})
	h := newHarness(t, func(c *Config) { c.Audit = audit })
	r := &recorder{}
	a := h.n.Attach(r, "127.0.0.1:5555")
	h.acquire(a, 1, "k", 0, 30)
	tok := want(t, r.one(t), wire.OpAcquire, 1).Token
	h.n.Release(a, 2, []byte("k"), tok)
	h.n.Release(a, 3, []byte("k"), tok)
	h.acquire(a, 4, "e", 0, 1)
	h.acquire(a, 5, "f", 0, 30)
	h.clock.Advance(2 * time.Second)
	h.n.Sweep()
	h.n.ForceRelease([]byte("f"), 0, func(uint64, error) {})
	var got []string
	for _, l := range jsonLines(t, buf.String()) {
		got = append(got, fmt.Sprintf("%v %v %v %v %v", l["event"], l["key"], l["token"], l["result"], l["from"]))
		if l["event"] == "grant" && l["lease"] == nil {
			t.Fatalf("grant without its lease: %v", l)
		}
	}
	want := []string{
		"grant k 1 granted 127.0.0.1:5555",
		"release k 1 released 127.0.0.1:5555",
		"release k 1 not_held 127.0.0.1:5555",
		"grant e 2 granted 127.0.0.1:5555",
		"grant f 3 granted 127.0.0.1:5555",
		"expire e 2 expired leader",
		"force_release f 3 released operator",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit trail:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// BenchmarkAudit is a single-mode acquire and release with the audit trail off and on (to
// io.Discard): off, it costs the nil checks only.
func BenchmarkAudit(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("audit=%v", on), func(b *testing.B) {
			cfg := DefaultConfig()
			if on {
				cfg.Audit = hclog.New(&hclog.LoggerOptions{Output: io.Discard, JSONFormat: true, Level: hclog.Info})
			}
			n, err := NewNode(cfg)
			if err != nil {
				b.Fatal(err)
			}
			c := n.Attach(dropReplies{}, "127.0.0.1:1")
			key := []byte("bench/key")
			var tok uint64
			b.ReportAllocs()
			for b.Loop() {
				n.Acquire(c, 1, key, 0, 30, n.Now())
				tok++
				n.Release(c, 2, key, tok)
			}
		})
	}
}

// BenchmarkLocksPage is one page of 1000 keys out of a million held ones (single mode): the
// time the node's mutex is held for one `latch locks` page.
func BenchmarkLocksPage(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxKeys = 2_000_000
	n, err := NewNode(cfg)
	if err != nil {
		b.Fatal(err)
	}
	c := n.Attach(dropReplies{}, "")
	for i := range 1_000_000 {
		n.Acquire(c, 1, []byte(fmt.Sprintf("k/%07d", i)), 0, 3600, n.Now())
	}
	b.ResetTimer()
	for b.Loop() {
		n.Locks("k/", "k/0500000", MaxLocksPage, func(p LocksPage, err error) {
			if err != nil || len(p.Locks) != MaxLocksPage {
				b.Fatalf("page: %d keys, %v", len(p.Locks), err)
			}
		})
	}
}

// jsonLines decodes a JSON logger's output, one object a line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var ls []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		ls = append(ls, l)
	}
	return ls
}
