package client

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

func TestShrink(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	def := rhoPPB(DefaultRho)
	if def != 1_000_000 {
		t.Fatalf("rhoPPB(DefaultRho) = %d, want 1e6", def)
	}
	for _, tc := range []struct {
		d    time.Duration
		ppb  uint64
		want time.Duration
	}{
		{0, def, 0},
		{-s, def, 0},
		{30 * s, def, 29970 * ms},     // 30 ms of a 30 s lease
		{3600 * s, def, 3596400 * ms}, // 3.6 s of an hour
		{31500 * ms, def, 31468500 * time.Microsecond}, // age 1.5 s + lease 30 s
		{1, def, 0}, // a margin below 1 ns is rounded up to 1 ns
		{999, def, 998},
		{1000, def, 999},
		{1001, def, 999}, // 1001 x 0.999 = 999.999, rounded down
		{30 * s, 1, 30*s - 30},
		{30 * s, 100_000_000, 27 * s}, // MaxRho
		{time.Duration(math.MaxInt64), 100_000_000, time.Duration(math.MaxInt64) - 922337203685477581},
	} {
		if got := shrink(tc.d, tc.ppb); got != tc.want {
			t.Errorf("shrink(%v, %d ppb) = %v, want %v", tc.d, tc.ppb, got, tc.want)
		}
	}
}

func TestGrantEnd(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	w := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	def := rhoPPB(DefaultRho)
	for _, tc := range []struct {
		name  string
		read  time.Duration // readAt - writtenAt
		age   uint32
		lease uint16
		want  time.Duration // deadline - writtenAt
	}{
		{"age 0", 20 * ms, 0, 30, 29970 * ms},
		{"age within what the client saw", 2 * s, 1500, 30, 31468500 * time.Microsecond},
		{"age equal to what the client saw", 1500 * ms, 1500, 30, 31468500 * time.Microsecond},
		// The draft's example: 50 s in the queue, read 20 ms later: 79.92 s, 29.9 s left.
		{"waiter granted after 50 s", 50020 * ms, 50000, 30, 79920 * ms},
		{"large age, within what the client saw", 255 * s, 254_999, 3600, 3851*s + 144_001*time.Microsecond},
		{"bogus age above what the client saw is capped", 20 * ms, 60_000, 30, 29990*ms - 20*time.Microsecond},
		{"the largest age is capped", 100 * ms, wire.MaxAge, 1, shrink(1100*ms, def)},
		{"no time seen: the age counts nothing", 0, 5000, 30, 29970 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := grantEnd(w, w.Add(tc.read), tc.age, tc.lease, def)
			if d := got.Sub(w); d != tc.want {
				t.Fatalf("deadline = written_at + %v, want + %v", d, tc.want)
			}
			// Never past what the client saw plus the lease counted from its read.
			if limit := w.Add(tc.read + time.Duration(tc.lease)*s); got.After(limit) {
				t.Fatalf("deadline %v after read_at + lease %v", got, limit)
			}
		})
	}
	// An age that is no later than what the client saw also never passes the draft's formula.
	for _, age := range []uint32{0, 1, 999, 1500, 50000} {
		read := time.Duration(age)*ms + 3*ms
		draft := min(shrink(time.Duration(age)*ms, def), read) + shrink(30*s, def)
		if got := grantEnd(w, w.Add(read), age, 30, def).Sub(w); got > draft {
			t.Errorf("age %d ms: %v, later than the draft's %v", age, got, draft)
		}
	}
	if n := testing.AllocsPerRun(100, func() { grantEnd(w, w.Add(s), 500, 30, def) }); n != 0 {
		t.Fatalf("grantEnd allocates %v times", n)
	}
}

func TestConfigRho(t *testing.T) {
	for _, tc := range []struct {
		rho  float64
		want float64
		err  bool
	}{
		{0, DefaultRho, false},
		{MinRho, MinRho, false},
		{MaxRho, MaxRho, false},
		{0.01, 0.01, false},
		{MinRho / 2, 0, true},
		{MaxRho * 1.01, 0, true},
		{-0.001, 0, true},
		{math.NaN(), 0, true},
		{math.Inf(1), 0, true},
	} {
		cfg, err := Config{Servers: []string{"127.0.0.1:1"}, Rho: tc.rho}.withDefaults()
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "Rho") {
				t.Errorf("Rho %v: %v, want an error naming Rho", tc.rho, err)
			}
			continue
		}
		if err != nil || cfg.Rho != tc.want {
			t.Errorf("Rho %v: %v %v, want %v", tc.rho, cfg.Rho, err, tc.want)
		}
	}
}
