package fence

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestGuardRule(t *testing.T) {
	g := NewGuard(0)
	steps := []struct {
		token uint64
		stale bool
		mark  uint64
	}{
		{5, false, 5},
		{5, false, 5}, // the same holder again
		{4, true, 5},
		{9, false, 9},
		{6, true, 9},
		{MaxToken - 1, false, MaxToken - 1},
		{MaxToken, false, MaxToken},
		{MaxToken, false, MaxToken},
		{MaxToken - 1, true, MaxToken},
	}
	for i, s := range steps {
		wrote := false
		err := g.Do("r", s.token, func() error { wrote = true; return nil })
		var stale *StaleError
		switch {
		case s.stale && !errors.As(err, &stale):
			t.Fatalf("step %d: token %d: %v, want a *StaleError", i, s.token, err)
		case s.stale && (!errors.Is(err, ErrStale) || stale.Token != s.token || stale.Seen != s.mark || stale.Resource != "r" || stale.Floor):
			t.Fatalf("step %d: token %d: %#v, want token %d seen %d", i, s.token, stale, s.token, s.mark)
		case !s.stale && err != nil:
			t.Fatalf("step %d: token %d: %v, want accepted", i, s.token, err)
		}
		if wrote == s.stale {
			t.Fatalf("step %d: token %d: write ran %v, want %v", i, s.token, wrote, !s.stale)
		}
		if m, ok := g.Mark("r"); !ok || m != s.mark {
			t.Fatalf("step %d: mark %d %v, want %d", i, m, ok, s.mark)
		}
	}
}

func TestGuardFailedWriteKeepsMark(t *testing.T) {
	g := NewGuard(0)
	if err := g.Accept("r", 10); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if err := g.Do("r", 20, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want the write's error", err)
	}
	if m, _ := g.Mark("r"); m != 10 {
		t.Fatalf("mark %d after a failed write, want 10", m)
	}
	if err := g.Accept("r", 15); err != nil {
		t.Fatalf("token 15 after the failed write of 20: %v, want accepted", err)
	}
}

func TestGuardInvalidTokens(t *testing.T) {
	g := NewGuard(0)
	for _, tok := range []uint64{0, MaxToken + 1, 1<<64 - 1} {
		if err := g.Do("r", tok, func() error { t.Fatal("write ran"); return nil }); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("token %d: %v, want ErrInvalidToken", tok, err)
		}
	}
	if g.Len() != 0 {
		t.Errorf("invalid tokens left %d entries", g.Len())
	}
	for _, s := range []string{"", "0", "-1", "x", "9223372036854775808", "18446744073709551616", "1.5"} {
		if _, err := ParseToken(s); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("ParseToken(%q) = %v, want ErrInvalidToken", s, err)
		}
	}
	if tok, err := ParseToken(" 9223372036854775807\n"); err != nil || tok != MaxToken {
		t.Errorf("ParseToken(max) = %d, %v", tok, err)
	}
}

// Forgetting a resource folds its mark into the floor: a forgotten resource refuses every
// token below it, so bounded memory never lets a stale write through.
func TestGuardBoundedMemory(t *testing.T) {
	g := NewGuard(3)
	for i := 1; i <= 10; i++ {
		if err := g.Accept(fmt.Sprintf("r%d", i), uint64(i*10)); err != nil {
			t.Fatal(err)
		}
		if g.Len() > 3 {
			t.Fatalf("after %d resources the guard remembers %d, limit 3", i, g.Len())
		}
	}
	// r8..r10 are remembered; r1..r7 are forgotten and the floor is r7's mark, 70.
	if m, ok := g.Mark("r9"); !ok || m != 90 {
		t.Fatalf("r9: %d %v, want 90 remembered", m, ok)
	}
	if m, ok := g.Mark("r1"); ok || m != 70 {
		t.Fatalf("r1: %d %v, want the floor 70, forgotten", m, ok)
	}
	err := g.Accept("r1", 15) // r1's own last token was 10, but the guard cannot know that
	var stale *StaleError
	if !errors.As(err, &stale) || !stale.Floor || stale.Seen != 70 {
		t.Fatalf("r1 token 15: %v, want refused by the floor 70", err)
	}
	if err := g.Accept("r1", 70); err != nil {
		t.Fatalf("r1 token 70: %v, want accepted (at the floor)", err)
	}
	if err := g.Accept("r1", 69); err == nil || errors.As(err, &stale) && stale.Floor {
		t.Fatalf("r1 token 69 after 70: %v, want refused by r1's own mark", err)
	}
	// The least recently used goes first: touch r9, add two more, r9 stays.
	g.Accept("r9", 90)
	g.Accept("r11", 110)
	g.Accept("r12", 120)
	if _, ok := g.Mark("r9"); !ok {
		t.Fatal("r9, used recently, was forgotten")
	}
}

// An entry with a write in progress is never forgotten, even past the limit.
func TestGuardKeepsEntriesInUse(t *testing.T) {
	g := NewGuard(1)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- g.Do("held", 50, func() error { close(inside); <-release; return nil })
	}()
	<-inside
	for i := 1; i <= 5; i++ {
		if err := g.Accept(fmt.Sprintf("other%d", i), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m, ok := g.Mark("held"); !ok || m != 50 {
		// It may be forgotten now (the limit is 1), but then the floor covers it.
		if m < 50 {
			t.Fatalf("held: mark %d (remembered %v), want at least 50", m, ok)
		}
	}
	if err := g.Accept("held", 49); !errors.Is(err, ErrStale) {
		t.Fatalf("held token 49 after 50: %v, want ErrStale", err)
	}
}

// Writers with interleaved tokens: in the order the writes happened, the accepted tokens
// never go down, every token above all before it is accepted, and the mark ends at the
// highest token.
func TestGuardConcurrentWriters(t *testing.T) {
	g := NewGuard(4)
	const writers, each = 8, 200
	var mu sync.Mutex
	var order []uint64 // tokens in the order their writes ran
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				tok := uint64(i*writers + w + 1)
				err := g.Do("shared", tok, func() error {
					mu.Lock()
					order = append(order, tok)
					mu.Unlock()
					return nil
				})
				if err != nil && !errors.Is(err, ErrStale) {
					t.Errorf("token %d: %v", tok, err)
				}
				g.Accept(fmt.Sprintf("w%d-%d", w, i%8), tok) // churn other resources past the limit
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("write %d carried token %d after %d", i, order[i], order[i-1])
		}
	}
	if m, _ := g.Mark("shared"); m != writers*each {
		t.Fatalf("mark %d, want the highest token %d", m, writers*each)
	}
	if len(order) == 0 || order[len(order)-1] != writers*each {
		t.Fatalf("the highest token's write did not run last: %v", order[max(0, len(order)-3):])
	}
}
