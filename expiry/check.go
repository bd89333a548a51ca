package expiry

import "fmt"

// Check verifies every invariant of h: the heap order, and an index that finds each holder at
// its position and nothing else.
func (h *Heap) Check() error {
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
		if p := h.find(e.Key); p != i {
			return fmt.Errorf("key %q is at %d, index finds %d", e.Key, i, p)
		}
		if sh, s := h.at(h.slot[i]); sh.pos[s] != uint32(i+1) {
			return fmt.Errorf("position %d names slot %x, which points to %d", i, h.slot[i], sh.pos[s])
		}
	}
	return nil
}
