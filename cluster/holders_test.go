package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/latchd/latch/fsm"
)

// check verifies every invariant of h: the heap order, and an index that finds each holder at
// its position and nothing else.
func (h *holders) check() error {
	for i := 1; i < len(h.heap); i++ {
		if before(&h.heap[i], &h.heap[(i-1)/4]) {
			return fmt.Errorf("heap order broken at %d", i)
		}
	}
	used := 0
	for si := range h.shards {
		sh := &h.shards[si]
		n, dead := 0, 0
		for _, p := range sh.pos {
			if p == gone {
				dead++
			}
			if p == 0 || p == gone {
				continue
			}
			if int(p) > len(h.heap) {
				return fmt.Errorf("index slot holds %d with %d holders", p, len(h.heap))
			}
			n++
		}
		if n != sh.n || dead != sh.dead {
			return fmt.Errorf("shard %d counts %d and %d gone, has %d and %d", si, sh.n, sh.dead, n, dead)
		}
		if len(sh.pos) > 0 && n+dead == len(sh.pos) {
			return fmt.Errorf("shard %d has no empty slot", si)
		}
		used += n
	}
	if used != len(h.heap) {
		return fmt.Errorf("index has %d slots for %d holders", used, len(h.heap))
	}
	if len(h.slot) != len(h.heap) {
		return fmt.Errorf("%d slot names for %d holders", len(h.slot), len(h.heap))
	}
	for i, e := range h.heap {
		if p := h.find(e.key); p != i {
			return fmt.Errorf("key %q is at %d, index finds %d", e.key, i, p)
		}
		if sh, s := h.at(h.slot[i]); sh.pos[s] != uint32(i+1) {
			return fmt.Errorf("position %d names slot %x, which points to %d", i, h.slot[i], sh.pos[s])
		}
	}
	return nil
}

// check verifies the view: its holders, and that bare counts the key states without one.
func (v *view) check() error {
	if err := v.held.check(); err != nil {
		return err
	}
	bare := 0
	for k, ks := range v.keys {
		if ks.key != k {
			return fmt.Errorf("key state of %q filed under %q", ks.key, k)
		}
		if _, ok := v.held.lookup(k); !ok {
			bare++
		}
	}
	if bare != v.bare {
		return fmt.Errorf("bare is %d, %d key states have no holder", v.bare, bare)
	}
	return nil
}

type modelHolder struct {
	tok      fsm.Token
	deadline int64
	parked   bool
}

// holders behaves like a map plus a sort, through random sets, parks, arms and removes over
// few keys (many collisions of the same key) and many (the index grows and shrinks).
func TestHoldersAgainstAModel(t *testing.T) {
	for _, keys := range []int{5, 300, 20_000} {
		rng := rand.New(rand.NewPCG(uint64(keys), 7))
		h := newHolders()
		model := map[string]modelHolder{}
		var tok fsm.Token
		for step := range 200_000 {
			key := "k" + strconv.Itoa(rng.IntN(keys))
			switch op := rng.IntN(10); {
			case op < 4:
				tok++
				d := int64(rng.IntN(50))
				if had := h.set(key, tok, d); had == (model[key] != modelHolder{}) {
					t.Fatalf("step %d: set %s reported new=%v", step, key, had)
				}
				model[key] = modelHolder{tok: tok, deadline: d}
			case op < 5:
				tok := model[key].tok
				if rng.IntN(4) == 0 {
					tok++ // another holder's token: nothing happens
				}
				h.park(key, tok)
				if m, ok := model[key]; ok && m.tok == tok {
					m.parked = true
					model[key] = m
				}
			case op < 6:
				d := int64(rng.IntN(50))
				h.arm(key, d)
				if m, ok := model[key]; ok {
					m.parked, m.deadline = false, d
					model[key] = m
				}
			case op < 9:
				_, had := model[key]
				if h.remove(key) != had {
					t.Fatalf("step %d: remove %s reported %v", step, key, !had)
				}
				delete(model, key)
			default:
				now := int64(rng.IntN(50))
				e, ok := h.peek(now)
				want := soonest(model, now)
				if ok != (want != "") || ok && e.key != want {
					t.Fatalf("step %d: peek(%d) = %q %v, want %q", step, now, e.key, ok, want)
				}
			}
			if e, ok := h.get([]byte(key)); ok != (model[key] != modelHolder{}) ||
				ok && (e.token() != model[key].tok || e.deadline != model[key].deadline || e.parked() != model[key].parked) {
				t.Fatalf("step %d: get %s = %+v %v, model %+v", step, key, e, ok, model[key])
			}
			if step%997 == 0 || keys < 100 && step%31 == 0 {
				if err := h.check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
		}
		if h.len() != len(model) {
			t.Fatalf("len %d, model %d", h.len(), len(model))
		}
		// Drain in due order.
		var got []string
		for {
			e, ok := h.peek(1 << 40)
			if !ok {
				break
			}
			got = append(got, e.key)
			h.remove(e.key)
		}
		if err := h.check(); err != nil {
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
		if h.len() != len(model)-len(want) {
			t.Fatalf("parked left: %d, want %d", h.len(), len(model)-len(want))
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
