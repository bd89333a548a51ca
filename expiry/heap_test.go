package expiry

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkInvariants fails the test unless every item knows its position and no
// child comes before its parent.
func checkInvariants(t *testing.T, h *Heap) {
	t.Helper()
	for i, it := range h.items {
		if it == nil {
			t.Fatalf("nil item at %d of %d", i, len(h.items))
		}
		if it.index != i+1 {
			t.Fatalf("item at %d has index %d, want %d", i, it.index, i+1)
		}
		if !it.Queued() {
			t.Fatalf("item at %d is not Queued", i)
		}
		if i > 0 {
			if p := h.items[(i-1)/2]; before(it, p) {
				t.Fatalf("item %d (%d,%d) before its parent (%d,%d)", i, it.Deadline, it.Token, p.Deadline, p.Token)
			}
		}
	}
	if p := h.Peek(); (p == nil) != (len(h.items) == 0) || (p != nil && p != h.items[0]) {
		t.Fatal("Peek does not return the root")
	}
}

func compareItems(a, b *Item) int {
	return cmp.Or(cmp.Compare(a.Deadline, b.Deadline), cmp.Compare(a.Token, b.Token))
}

func drain(t *testing.T, h *Heap) []*Item {
	t.Helper()
	var out []*Item
	for h.Len() > 0 {
		n := h.Len()
		it := h.Pop()
		if it.Queued() {
			t.Fatal("popped item still Queued")
		}
		if h.Len() != n-1 {
			t.Fatalf("Len %d after Pop from %d", h.Len(), n)
		}
		checkInvariants(t, h)
		out = append(out, it)
	}
	return out
}

func TestRandomPushesPopInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 100, 3000} {
		var h Heap
		want := make([]*Item, n)
		for i := range want {
			// Few distinct deadlines, so ties are common; tokens are distinct.
			want[i] = &Item{Deadline: rng.Int64N(20) - 10, Token: uint64(i + 1)}
		}
		rng.Shuffle(n, func(i, j int) { want[i], want[j] = want[j], want[i] })
		for _, it := range want {
			h.Push(it)
			if !it.Queued() {
				t.Fatal("pushed item not Queued")
			}
		}
		checkInvariants(t, &h)
		slices.SortFunc(want, compareItems)
		got := drain(t, &h)
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: pop order differs from sorted order", n)
		}
	}
}

func TestTiesBreakByLowerToken(t *testing.T) {
	var h Heap
	for _, tok := range []uint64{5, 3, 9, 1, 7} {
		h.Push(&Item{Deadline: 100, Token: tok})
	}
	h.Push(&Item{Deadline: 99, Token: 50})
	var got []uint64
	for it := h.Pop(); it != nil; it = h.Pop() {
		got = append(got, it.Token)
	}
	if want := []uint64{50, 1, 3, 5, 7, 9}; !slices.Equal(got, want) {
		t.Fatalf("tokens popped %v, want %v", got, want)
	}
}

func TestEmptyHeap(t *testing.T) {
	var h Heap
	if h.Pop() != nil || h.Peek() != nil || h.Len() != 0 {
		t.Fatal("empty heap is not empty")
	}
	it := &Item{Deadline: 1, Token: 1, Key: "k"}
	if it.Queued() {
		t.Fatal("new item is Queued")
	}
	if h.Remove(it) {
		t.Fatal("Remove of a non-queued item = true")
	}
	h.Reset()
	if h.Len() != 0 {
		t.Fatal("Reset of empty heap")
	}
}

// fill pushes items with deadlines 0..n-1 in shuffled order and returns them
// indexed by deadline.
func fill(t *testing.T, h *Heap, n int, seed uint64) []*Item {
	t.Helper()
	items := make([]*Item, n)
	for i := range items {
		items[i] = &Item{Deadline: int64(i), Token: uint64(i + 1)}
	}
	order := rand.New(rand.NewPCG(seed, seed)).Perm(n)
	for _, i := range order {
		h.Push(items[i])
	}
	checkInvariants(t, h)
	return items
}

func TestRemoveKeepsInvariants(t *testing.T) {
	const n = 63
	cases := map[string]func(h *Heap) *Item{
		"top":    func(h *Heap) *Item { return h.items[0] },
		"bottom": func(h *Heap) *Item { return h.items[len(h.items)-1] },
		"middle": func(h *Heap) *Item { return h.items[len(h.items)/2] },
		"second": func(h *Heap) *Item { return h.items[min(1, len(h.items)-1)] },
	}
	for name, pick := range cases {
		t.Run(name, func(t *testing.T) {
			var h Heap
			items := fill(t, &h, n, 7)
			removed := map[*Item]bool{}
			for h.Len() > 0 {
				it := pick(&h)
				if !h.Remove(it) {
					t.Fatalf("Remove of a queued item = false")
				}
				if it.Queued() {
					t.Fatal("removed item still Queued")
				}
				if h.Remove(it) {
					t.Fatal("second Remove = true")
				}
				removed[it] = true
				checkInvariants(t, &h)
				// Exactly the items not removed are still queued here.
				for _, x := range items {
					if _, queued := h.position(x); queued == removed[x] {
						t.Fatalf("item %d: queued %v, removed %v", x.Deadline, queued, removed[x])
					}
				}
				if h.Len() != n-len(removed) {
					t.Fatalf("Len %d, want %d", h.Len(), n-len(removed))
				}
			}
		})
	}

	t.Run("then pop order", func(t *testing.T) {
		var h Heap
		items := fill(t, &h, n, 9)
		var want []*Item
		for i, it := range items {
			if i%3 == 1 {
				if !h.Remove(it) {
					t.Fatalf("Remove(%d) = false", i)
				}
				checkInvariants(t, &h)
			} else {
				want = append(want, it)
			}
		}
		if got := drain(t, &h); !slices.Equal(got, want) {
			t.Fatal("pop order after removals differs")
		}
	})
}

func TestRemoveFromAnotherHeap(t *testing.T) {
	var a, b Heap
	fill(t, &b, 5, 1)
	it := &Item{Deadline: 1, Token: 1}
	a.Push(it)
	if b.Remove(it) {
		t.Fatal("Remove of another heap's item = true")
	}
	checkInvariants(t, &b)
	if b.Len() != 5 || !it.Queued() {
		t.Fatal("foreign Remove changed something")
	}
}

func TestFixUpAndDown(t *testing.T) {
	var h Heap
	items := fill(t, &h, 31, 3)

	h.Fix(items[20], -5) // up, to the top
	checkInvariants(t, &h)
	if h.Peek() != items[20] {
		t.Fatal("Fix up did not reach the top")
	}

	h.Fix(items[20], 1000) // down, to the bottom of the order
	checkInvariants(t, &h)
	h.Fix(items[0], 15) // the top, down into the middle (ties 15 with item 15, token 1 < 16)
	checkInvariants(t, &h)
	h.Fix(items[30], 30) // unchanged
	checkInvariants(t, &h)

	want := slices.Clone(items)
	slices.SortFunc(want, compareItems)
	if got := drain(t, &h); !slices.Equal(got, want) {
		t.Fatal("pop order after Fix differs")
	}
	if items[0].Deadline != 15 || items[20].Deadline != 1000 {
		t.Fatal("Fix did not set Deadline")
	}
}

func expectPanic(t *testing.T, substr string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		s, _ := r.(string)
		if r == nil || !strings.Contains(s, substr) {
			t.Fatalf("panic %v, want one mentioning %q", r, substr)
		}
	}()
	fn()
}

func TestMisusePanics(t *testing.T) {
	var a, b Heap
	it := &Item{Deadline: 1, Token: 1}
	a.Push(it)
	expectPanic(t, "already queued", func() { a.Push(it) })
	expectPanic(t, "already queued", func() { b.Push(it) })
	expectPanic(t, "not queued in this heap", func() { b.Fix(it, 5) })
	expectPanic(t, "not queued in this heap", func() { a.Fix(&Item{}, 5) })
	checkInvariants(t, &a)
	if a.Len() != 1 || b.Len() != 0 || it.Deadline != 1 {
		t.Fatal("a panicking call changed a heap")
	}
}

func TestReset(t *testing.T) {
	var h Heap
	items := fill(t, &h, 10, 5)
	h.Reset()
	if h.Len() != 0 || h.Peek() != nil {
		t.Fatal("Reset left items")
	}
	for _, it := range items {
		if it.Queued() {
			t.Fatal("item still Queued after Reset")
		}
	}
	// Items can be reused after Reset.
	for _, it := range items {
		h.Push(it)
	}
	checkInvariants(t, &h)
}

func TestShrinkAfterMassRemoval(t *testing.T) {
	var h Heap
	fill(t, &h, 10_000, 11)
	peak := cap(h.items)
	for h.Len() > 10 {
		h.Pop()
	}
	checkInvariants(t, &h)
	if c := cap(h.items); c > minShrinkCap {
		t.Fatalf("cap %d after draining from %d, want at most %d", c, peak, minShrinkCap)
	}
}

// TestMatchesSortedModel applies random Push, Pop, Remove and Fix to a Heap
// and to a sorted slice, checking results and invariants after every step.
func TestMatchesSortedModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0xe791))
		var h Heap
		var model []*Item // queued items, sorted
		var known []*Item // every item ever made, queued or not
		var nextToken uint64 = 1
		for step := range 3000 {
			switch op := rng.IntN(10); {
			case op < 4:
				var it *Item
				if len(known) > 0 && rng.IntN(3) == 0 {
					it = known[rng.IntN(len(known))] // maybe reuse a popped or removed item
					if it.Queued() {
						continue
					}
					it.Deadline = rng.Int64N(100)
				} else {
					it = &Item{Deadline: rng.Int64N(100), Token: nextToken}
					nextToken++
					known = append(known, it)
				}
				h.Push(it)
				i, _ := slices.BinarySearchFunc(model, it, compareItems)
				model = slices.Insert(model, i, it)
			case op < 6:
				got := h.Pop()
				if len(model) == 0 {
					if got != nil {
						t.Fatalf("seed %d step %d: Pop on empty = %+v", seed, step, got)
					}
					continue
				}
				if got != model[0] {
					t.Fatalf("seed %d step %d: Pop = %+v, model %+v", seed, step, got, model[0])
				}
				model = model[1:]
			case op < 8:
				if len(known) == 0 {
					continue
				}
				it := known[rng.IntN(len(known))]
				i, queued := slices.BinarySearchFunc(model, it, compareItems)
				if got := h.Remove(it); got != queued {
					t.Fatalf("seed %d step %d: Remove = %v, model %v", seed, step, got, queued)
				}
				if queued {
					model = slices.Delete(model, i, i+1)
				}
			default:
				if len(model) == 0 {
					continue
				}
				i := rng.IntN(len(model))
				it := model[i]
				model = slices.Delete(model, i, i+1)
				h.Fix(it, rng.Int64N(100))
				j, _ := slices.BinarySearchFunc(model, it, compareItems)
				model = slices.Insert(model, j, it)
			}
			checkInvariants(t, &h)
			if h.Len() != len(model) {
				t.Fatalf("seed %d step %d: Len %d, model %d", seed, step, h.Len(), len(model))
			}
			if len(model) > 0 && h.Peek() != model[0] {
				t.Fatalf("seed %d step %d: Peek differs from model", seed, step)
			}
		}
		if got := drain(t, &h); !slices.Equal(got, model) {
			t.Fatalf("seed %d: final drain differs from model", seed)
		}
	}
}
