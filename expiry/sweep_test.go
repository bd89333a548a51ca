package expiry

import (
	"slices"
	"testing"
	"time"
)

func TestSweepInterval(t *testing.T) {
	if SweepInterval != 5*time.Second {
		t.Fatalf("SweepInterval = %v, PROTOCOL.md section 6 says 5s", SweepInterval)
	}
}

func TestPopDueChunks(t *testing.T) {
	var h Heap
	items := fill(t, &h, 100, 13) // deadlines 0..99
	const now = 49                // items 0..49 are due: 50 of them

	var popped []*Item
	collect := func(it *Item) {
		if it.Queued() {
			t.Fatal("fn got an item that is still queued")
		}
		if it.Deadline > now {
			t.Fatalf("popped item due at %d, now %d", it.Deadline, now)
		}
		popped = append(popped, it)
	}

	for i, want := range []struct {
		n    int
		more bool
	}{{16, true}, {16, true}, {16, true}, {2, false}, {0, false}} {
		n, more := PopDue(&h, now, 16, collect)
		if n != want.n || more != want.more {
			t.Fatalf("chunk %d: PopDue = %d, %v; want %d, %v", i, n, more, want.n, want.more)
		}
		checkInvariants(t, &h)
	}
	if !slices.Equal(popped, items[:50]) {
		t.Fatal("due items not popped in deadline order")
	}
	if h.Len() != 50 || h.Peek() != items[50] {
		t.Fatal("a not-yet-due item was popped")
	}
}

func TestPopDueExactChunk(t *testing.T) {
	var h Heap
	fill(t, &h, 10, 1)
	// Exactly max due items: more must be false, not a guess.
	if n, more := PopDue(&h, 3, 4, nil); n != 4 || more {
		t.Fatalf("PopDue = %d, %v; want 4, false", n, more)
	}
	if n, more := PopDue(&h, 5, 0, nil); n != 0 || !more {
		t.Fatalf("PopDue max 0 = %d, %v; want 0, true", n, more)
	}
	if n, more := PopDue(&h, 5, -1, nil); n != 0 || !more {
		t.Fatalf("PopDue max -1 = %d, %v; want 0, true", n, more)
	}
	var empty Heap
	if n, more := PopDue(&empty, 1<<62, 10, nil); n != 0 || more {
		t.Fatalf("PopDue on empty = %d, %v", n, more)
	}
}

func TestPopDueFnMayPush(t *testing.T) {
	var h Heap
	fill(t, &h, 4, 2) // deadlines 0..3
	tok := uint64(100)
	n, more := PopDue(&h, 3, 10, func(it *Item) {
		// Re-queue for later, as a caller granting the next waiter would.
		tok++
		h.Push(&Item{Deadline: it.Deadline + 10, Token: tok})
	})
	if n != 4 || more || h.Len() != 4 {
		t.Fatalf("PopDue = %d, %v, Len %d; want 4, false, 4", n, more, h.Len())
	}
	checkInvariants(t, &h)
}

func TestPopDueDoesNotAllocate(t *testing.T) {
	var h Heap
	items := fill(t, &h, 64, 4)
	if a := testing.AllocsPerRun(50, func() {
		PopDue(&h, 1<<62, 64, nil)
		for _, it := range items {
			h.Push(it)
		}
	}); a != 0 {
		t.Fatalf("PopDue/Push: %v allocs per run", a)
	}
}
