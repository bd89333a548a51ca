package cluster

import "testing"

func TestGateHysteresis(t *testing.T) {
	// Limit 20: closes at 18 (90%), opens again below 15 (75%).
	steps := []struct {
		gauge int
		open  bool
	}{
		{0, true}, {17, true}, {18, false}, {19, false}, {20, false},
		{17, false}, {15, false}, {14, true}, {17, true}, {18, false},
		{16, false}, {0, true},
	}
	g := Gate{Limit: 20}
	for i, s := range steps {
		if got := g.Admit(s.gauge); got != s.open {
			t.Fatalf("step %d: Admit(%d) = %v, want %v", i, s.gauge, got, s.open)
		}
		if g.Closed() == s.open {
			t.Fatalf("step %d: Closed() = %v disagrees with Admit", i, g.Closed())
		}
	}
}

func TestGateSmallLimits(t *testing.T) {
	cases := []struct {
		limit, closeAt, openBelow int
	}{
		{1, 1, 1},  // 90% of 1 rounds up to 1; open again only at 0
		{2, 2, 2},  // 1.8 -> 2; below 1.5 -> 0 or 1
		{4, 4, 3},  // 3.6 -> 4; below 3
		{10, 9, 8}, // 9; below 7.5 -> 7
		{100, 90, 75},
	}
	for _, c := range cases {
		g := Gate{Limit: c.limit}
		for v := 0; v < c.closeAt; v++ {
			if !g.Admit(v) {
				t.Fatalf("limit %d: closed at %d, want open below %d", c.limit, v, c.closeAt)
			}
		}
		if g.Admit(c.closeAt) {
			t.Fatalf("limit %d: open at %d, want closed", c.limit, c.closeAt)
		}
		for v := c.closeAt; v >= c.openBelow && v > 0; v-- {
			if v*4 >= c.limit*3 && g.Admit(v) {
				t.Fatalf("limit %d: reopened at %d (75%% mark is %d)", c.limit, v, c.limit*3/4)
			}
		}
		if !g.Admit(0) {
			t.Fatalf("limit %d: still closed at 0", c.limit)
		}
	}
}

func TestGateNoLimit(t *testing.T) {
	var g Gate
	if !g.Admit(1 << 30) {
		t.Fatal("a gate without a limit must stay open")
	}
}
