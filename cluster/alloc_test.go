package cluster

import (
	"testing"

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
	c := n.Attach(dropReplies{})
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
