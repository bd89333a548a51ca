package cluster

import (
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

type dropReplies struct{}

func (dropReplies) Reply(wire.Response) {}

// A single-mode acquire and release of a free key allocate only the table's own key string:
// the applier seam costs the hot path nothing.
func TestSingleModeAcquireReleaseAllocs(t *testing.T) {
	n, err := NewNode(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := n.Attach(dropReplies{}, "")
	key := []byte("alloc/key")
	var tok uint64
	allocs := testing.AllocsPerRun(1000, func() {
		n.Acquire(c, 1, key, 0, 30, n.Now())
		tok++
		n.Release(c, 2, key, tok)
	})
	t.Logf("%.1f allocations per acquire+release", allocs)
	if allocs > 2 {
		t.Fatalf("%.1f allocations per acquire+release, want at most 2 (the table's key string and the view's key state)", allocs)
	}
}

// lastReply keeps the node's last answer, so a test can read a grant's age without an
// allocation per reply.
type lastReply struct{ r wire.Response }

func (l *lastReply) Reply(r wire.Response) { l.r = r }

// Grant age (revision 2) adds no allocation to the acquire path: a grant of a request read
// 1.5 s before the node decides it, which carries that wait as its age, costs exactly what a
// grant read just now (age 0) costs, and both stay within the bound above. proposeAcquire,
// which counts the age, is the one path of single and cluster mode.
func TestGrantAgeAddsNoAllocation(t *testing.T) {
	n, err := NewNode(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	out := &lastReply{}
	c := n.Attach(out, "")
	key := []byte("alloc/age")
	var tok uint64
	pair := func(readAt func() time.Time) (allocs float64, bad wire.Response) {
		allocs = testing.AllocsPerRun(1000, func() {
			n.Acquire(c, 1, key, 0, 30, readAt())
			if out.r.Op != wire.OpAcquire {
				bad = out.r
			}
			tok = out.r.Token
			n.Release(c, 2, key, tok)
		})
		return allocs, bad
	}
	fresh, bad := pair(n.Now)
	if bad.Op != 0 {
		t.Fatalf("an acquire read now was answered %+v, want a grant", bad)
	}
	aged, bad := pair(func() time.Time { return n.Now().Add(-1500 * time.Millisecond) })
	if bad.Op != 0 {
		t.Fatalf("an acquire read 1.5 s ago was answered %+v, want a grant", bad)
	}
	n.Acquire(c, 1, key, 0, 30, n.Now().Add(-1500*time.Millisecond))
	if out.r.Op != wire.OpAcquire || out.r.Age < 1500 {
		t.Fatalf("grant %+v: want an age of at least 1500 ms", out.r)
	}
	t.Logf("%.1f allocations per acquire+release with age 0, %.1f with age %d ms", fresh, aged, out.r.Age)
	if aged != fresh || aged > 2 {
		t.Fatalf("%.1f allocations per acquire+release with an age, %.1f without: want the same, at most 2", aged, fresh)
	}
}
