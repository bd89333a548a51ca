package forward

import (
	"testing"
	"time"
)

func TestStamp(t *testing.T) {
	read := time.Now()
	ms := time.Millisecond
	for _, c := range []struct {
		wait    uint8
		elapsed time.Duration
		want    uint8
		ok      bool
	}{
		{0, 0, 0, true},                // the immediate attempt stays immediate
		{0, 10 * time.Second, 0, true}, // ... however late (its own unsent deadline bounds it)
		{1, 0, 1, true},
		{1, 1 * ms, 1, true},   // 999 ms left: rounded up
		{1, 999 * ms, 1, true}, // 1 ms left: still a whole second
		{1, time.Second, 0, false},
		{1, 2 * time.Second, 0, false},
		{5, 0, 5, true},
		{5, 1500 * ms, 4, true}, // 3.5 s left -> 4
		{5, 2 * time.Second, 3, true},
		{5, 4*time.Second + 1, 1, true},
		{255, 0, 255, true},
		{255, 254 * time.Second, 1, true},
		{255, 255 * time.Second, 0, false},
		{3, -2 * time.Second, 3, true}, // a clock behind readAt never gives more than asked
	} {
		got, ok := stamp(c.wait, read, read.Add(c.elapsed))
		if got != c.want || ok != c.ok {
			t.Errorf("stamp(wait %d, %v after the read) = %d, %v; want %d, %v", c.wait, c.elapsed, got, ok, c.want, c.ok)
		}
		// Never shorter than asked: the leader's wait, counted from a read after now, ends at
		// or after readAt + wait.
		if ok && c.wait > 0 && c.elapsed >= 0 && read.Add(c.elapsed).Add(time.Duration(got)*time.Second).Before(read.Add(time.Duration(c.wait)*time.Second)) {
			t.Errorf("stamp(wait %d, %v after) = %d ends before the client's wait", c.wait, c.elapsed, got)
		}
	}
}

func TestUnsentDeadline(t *testing.T) {
	read := time.Now()
	if got := unsentDeadline(3, read, time.Second); !got.Equal(read.Add(3 * time.Second)) {
		t.Errorf("wait 3: unsent deadline %v after the read, want 3s", got.Sub(read))
	}
	if got := unsentDeadline(0, read, 5*time.Second); !got.Equal(read.Add(5 * time.Second)) {
		t.Errorf("wait 0: unsent deadline %v after the read, want the unsent timeout", got.Sub(read))
	}
}
