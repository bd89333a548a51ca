package expiry

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

type modelHolder struct {
	tok      uint64
	deadline int64
	parked   bool
}

// A Heap behaves like a map plus a sort, through random sets, parks, arms and removes over
// few keys (many collisions of the same key) and many (the index grows and shrinks).
func TestHeapAgainstAModel(t *testing.T) {
	for _, keys := range []int{5, 300, 20_000} {
		rng := rand.New(rand.NewPCG(uint64(keys), 7))
		h := NewHeap()
		model := map[string]modelHolder{}
		var tok uint64
		for step := range 200_000 {
			key := "k" + strconv.Itoa(rng.IntN(keys))
			switch op := rng.IntN(10); {
			case op < 4:
				tok++
				d := int64(rng.IntN(50))
				if had := h.Set(key, tok, d); had == (model[key] != modelHolder{}) {
					t.Fatalf("step %d: set %s reported new=%v", step, key, had)
				}
				model[key] = modelHolder{tok: tok, deadline: d}
			case op < 5:
				tok := model[key].tok
				if rng.IntN(4) == 0 {
					tok++ // another holder's token: nothing happens
				}
				h.Park(key, tok)
				if m, ok := model[key]; ok && m.tok == tok {
					m.parked = true
					model[key] = m
				}
			case op < 6:
				d := int64(rng.IntN(50))
				h.Arm(key, d)
				if m, ok := model[key]; ok {
					m.parked, m.deadline = false, d
					model[key] = m
				}
			case op < 9:
				_, had := model[key]
				if h.Remove(key) != had {
					t.Fatalf("step %d: remove %s reported %v", step, key, !had)
				}
				delete(model, key)
			default:
				now := int64(rng.IntN(50))
				e, ok := h.Peek(now)
				want := soonest(model, now)
				if ok != (want != "") || ok && e.Key != want {
					t.Fatalf("step %d: peek(%d) = %q %v, want %q", step, now, e.Key, ok, want)
				}
			}
			if e, ok := h.Get([]byte(key)); ok != (model[key] != modelHolder{}) ||
				ok && (e.Token() != model[key].tok || e.Deadline != model[key].deadline || e.Parked() != model[key].parked) {
				t.Fatalf("step %d: get %s = %+v %v, model %+v", step, key, e, ok, model[key])
			}
			if step%997 == 0 || keys < 100 && step%31 == 0 {
				if err := h.Check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
		}
		if h.Len() != len(model) {
			t.Fatalf("len %d, model %d", h.Len(), len(model))
		}
		// Drain in due order.
		var got []string
		for {
			e, ok := h.Peek(1 << 40)
			if !ok {
				break
			}
			got = append(got, e.Key)
			h.Remove(e.Key)
		}
		if err := h.Check(); err != nil {
			t.Fatal(err)
		}
		var want []string
		for k, m := range model {
			if !m.parked {
				want = append(want, k)
			}
		}
		slices.SortFunc(want, func(a, b string) int {
			ma, mb := model[a], model[b]
			if ma.deadline != mb.deadline {
				return int(ma.deadline - mb.deadline)
			}
			return int(ma.tok) - int(mb.tok)
		})
		if !slices.Equal(got, want) {
			t.Fatalf("%d keys: drained %d in an order other than the model's %d", keys, len(got), len(want))
		}
		if h.Len() != len(model)-len(want) {
			t.Fatalf("parked left: %d, want %d", h.Len(), len(model)-len(want))
		}
	}
}

// soonest is the model's due holder that the heap must show first.
func soonest(model map[string]modelHolder, now int64) string {
	best := ""
	for k, m := range model {
		if m.parked || m.deadline > now {
			continue
		}
		if b := model[best]; best == "" || m.deadline < b.deadline || m.deadline == b.deadline && m.tok < b.tok {
			best = k
		}
	}
	return best
}

// Next is the soonest deadline that is not parked: what an expiry timer is set for.
func TestHeapNext(t *testing.T) {
	h := NewHeap()
	if _, ok := h.Next(); ok {
		t.Fatal("an empty heap has a next deadline")
	}
	h.Set("a", 1, 30)
	h.Set("b", 2, 10)
	if d, ok := h.Next(); !ok || d != 10 {
		t.Fatalf("Next %d %v, want 10", d, ok)
	}
	h.Park("b", 2)
	if d, ok := h.Next(); !ok || d != 30 {
		t.Fatalf("Next with b parked %d %v, want 30", d, ok)
	}
	h.Park("a", 1)
	if _, ok := h.Next(); ok {
		t.Fatal("a heap of parked holders has a next deadline")
	}
	h.Arm("b", 5)
	if d, ok := h.Next(); !ok || d != 5 {
		t.Fatalf("Next after Arm %d %v, want 5", d, ok)
	}
}

// Retime moves a holder's deadline and keeps it parked or armed; another token's holder is
// left alone.
func TestHeapRetime(t *testing.T) {
	h := NewHeap()
	h.Set("a", 1, 30)
	h.Set("b", 2, 10)
	h.Retime("b", 2, 50)
	if d, ok := h.Next(); !ok || d != 30 {
		t.Fatalf("Next after b moved to 50: %d %v, want 30 (a)", d, ok)
	}
	if e, ok := h.Peek(60); !ok || e.Key != "a" {
		t.Fatalf("Peek(60) = %+v %v, want a first", e, ok)
	}
	h.Retime("a", 9, 100) // not a's token: nothing changes
	if e, _ := h.Lookup("a"); e.Deadline != 30 {
		t.Fatalf("a retimed by another token: deadline %d", e.Deadline)
	}
	h.Park("a", 1)
	h.Retime("a", 1, 5)
	if e, _ := h.Lookup("a"); !e.Parked() || e.Deadline != 5 {
		t.Fatalf("retimed parked a = %+v, want parked with deadline 5", e)
	}
	if _, ok := h.Peek(1000); !ok {
		t.Fatal("b is due at 1000")
	}
	if e, _ := h.Peek(1000); e.Key != "b" {
		t.Fatalf("a parked holder came due: %+v", e)
	}
}

func TestHeapEachVisitsEveryHolderOnce(t *testing.T) {
	h := NewHeap()
	for i := range 1000 {
		h.Set("k"+strconv.Itoa(i), uint64(i+1), int64(i%7))
	}
	h.Remove("k10")
	seen := map[string]uint64{}
	h.Each(func(e Entry) bool {
		if _, dup := seen[e.Key]; dup {
			t.Fatalf("%s visited twice", e.Key)
		}
		seen[e.Key] = e.Token()
		return true
	})
	if len(seen) != 999 || seen["k10"] != 0 || seen["k999"] != 1000 {
		t.Fatalf("visited %d holders (k10 %d, k999 %d)", len(seen), seen["k10"], seen["k999"])
	}
	n := 0
	h.Each(func(Entry) bool { n++; return n < 5 })
	if n != 5 {
		t.Fatalf("Each went on after false: %d calls", n)
	}
}

// Grow on a heap that holds entries keeps them all, findable and in deadline order, and the
// Sets it made room for neither copy the heap nor rebuild an index shard.
func TestHeapGrow(t *testing.T) {
	h := NewHeap()
	for i := range 300 {
		h.Set("a"+strconv.Itoa(i), uint64(i+1), int64(1000-i))
	}
	const more = 200_000 // large enough that no shard gets a third more than its even share (9 sigma)
	h.Grow(more)
	capBefore := cap(h.heap)
	sizes := make([]int, indexShards)
	for si := range h.shards {
		sizes[si] = len(h.shards[si].pos)
	}
	for i := range more {
		h.Set("b"+strconv.Itoa(i), uint64(1000+i), int64(i%50))
	}
	if cap(h.heap) != capBefore {
		t.Errorf("the heap was copied: cap %d, then %d", capBefore, cap(h.heap))
	}
	for si := range h.shards {
		if len(h.shards[si].pos) != sizes[si] {
			t.Fatalf("shard %d was rebuilt: %d slots, then %d", si, sizes[si], len(h.shards[si].pos))
		}
	}
	if e, ok := h.Lookup("a7"); !ok || e.Token() != 8 || e.Deadline != 993 {
		t.Fatalf("a7 after Grow: %+v %v", e, ok)
	}
	last := int64(-1)
	for n := 0; h.Len() > 0; n++ {
		e, ok := h.Peek(1 << 40)
		if !ok || e.Deadline < last {
			t.Fatalf("entry %d: %+v %v after deadline %d", n, e, ok, last)
		}
		last = e.Deadline
		h.Remove(e.Key)
	}
}
