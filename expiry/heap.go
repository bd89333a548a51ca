package expiry

// Item is one lease deadline. It carries the token it was made for: when it
// comes due, the caller frees the key only if that token still holds it (a
// stale item is dropped, never acted on).
//
// Build items with a composite literal; the zero value is not queued. While
// an item is queued, change its Deadline only through Heap.Fix and do not
// change its Token.
type Item struct {
	Deadline int64  // caller's clock (e.g. monotonic nanoseconds); the heap orders by it
	Token    uint64 // the token this deadline was made for; breaks deadline ties, lower first
	Key      string // the locked key, shared with the lock table

	// index is the item's position in its heap plus one, so that the zero
	// value, which is what a composite literal from another package gets,
	// means "not queued".
	index int
}

// Queued reports whether the item is in a heap.
func (it *Item) Queued() bool { return it.index != 0 }

// before is the heap order: earlier deadline first, then lower token.
func before(a, b *Item) bool {
	if a.Deadline != b.Deadline {
		return a.Deadline < b.Deadline
	}
	return a.Token < b.Token
}

// Heap is a min-heap of *Item by Deadline (ties: lower Token first), with
// O(log n) removal and re-timing of a known item. The zero value is an empty
// heap. A Heap is not safe for concurrent use.
type Heap struct {
	items []*Item
}

// minShrinkCap is the capacity below which the slice is never shrunk.
const minShrinkCap = 1024

// Len returns the number of queued items.
func (h *Heap) Len() int { return len(h.items) }

// Push queues it. Pushing an item that is already queued, in this heap or
// another, is a programming error and panics.
func (h *Heap) Push(it *Item) {
	if it.index != 0 {
		panic("expiry: Push of an item that is already queued; use Fix to change its deadline or Remove it first")
	}
	h.items = append(h.items, it)
	it.index = len(h.items)
	h.up(len(h.items) - 1)
}

// Peek returns the item with the earliest deadline without removing it, or
// nil when the heap is empty.
func (h *Heap) Peek() *Item {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// Pop removes and returns the item with the earliest deadline, or nil when
// the heap is empty. The popped item is no longer queued and may be pushed
// again.
func (h *Heap) Pop() *Item {
	if len(h.items) == 0 {
		return nil
	}
	return h.removeAt(0)
}

// Remove takes it out of the heap and reports whether it was there. It
// returns false, changing nothing, for an item that is not queued or is
// queued in another heap.
func (h *Heap) Remove(it *Item) bool {
	i, ok := h.position(it)
	if !ok {
		return false
	}
	h.removeAt(i)
	return true
}

// Fix sets it.Deadline to deadline and restores the heap order, in O(log n).
// It is how a new leader restarts a lease in full. Fixing an item that is not
// queued in this heap is a programming error and panics; to re-queue a popped
// or removed item, set its Deadline and Push it.
func (h *Heap) Fix(it *Item, deadline int64) {
	i, ok := h.position(it)
	if !ok {
		panic("expiry: Fix of an item that is not queued in this heap; set Deadline and Push it instead")
	}
	it.Deadline = deadline
	if !h.down(i) {
		h.up(i)
	}
}

// Reset empties the heap, for example when a node stops leading. Every item
// it held is left not queued, so it may be pushed again. It frees the slice.
func (h *Heap) Reset() {
	for _, it := range h.items {
		it.index = 0
	}
	h.items = nil
}

// position returns it's index in h.items if it is queued in h.
func (h *Heap) position(it *Item) (int, bool) {
	i := it.index - 1
	if i < 0 || i >= len(h.items) || h.items[i] != it {
		return 0, false
	}
	return i, true
}

// removeAt removes and returns the item at position i.
func (h *Heap) removeAt(i int) *Item {
	last := len(h.items) - 1
	it := h.items[i]
	if i != last {
		moved := h.items[last]
		h.items[i] = moved
		moved.index = i + 1
	}
	h.items[last] = nil // let the collector have it once the caller is done
	h.items = h.items[:last]
	if i != last && !h.down(i) {
		h.up(i)
	}
	it.index = 0
	h.shrink()
	return it
}

// shrink halves the slice's capacity once it is less than a quarter used, so
// a heap that held 1,000,000 leases does not keep their slots after a mass
// expiry. Amortised O(1) per removal.
func (h *Heap) shrink() {
	if c := cap(h.items); c > minShrinkCap && len(h.items) < c/4 {
		items := make([]*Item, len(h.items), c/2)
		copy(items, h.items)
		h.items = items
	}
}

// up moves the item at position i towards the root until its parent is not
// after it.
func (h *Heap) up(i int) {
	it := h.items[i]
	for i > 0 {
		p := (i - 1) / 2
		parent := h.items[p]
		if !before(it, parent) {
			break
		}
		h.items[i] = parent
		parent.index = i + 1
		i = p
	}
	h.items[i] = it
	it.index = i + 1
}

// down moves the item at position i0 towards the leaves until no child is
// before it, and reports whether it moved.
func (h *Heap) down(i0 int) bool {
	n := len(h.items)
	i := i0
	it := h.items[i]
	for {
		c := 2*i + 1
		if c >= n || c < 0 { // c < 0: int overflow
			break
		}
		if r := c + 1; r < n && before(h.items[r], h.items[c]) {
			c = r
		}
		child := h.items[c]
		if !before(child, it) {
			break
		}
		h.items[i] = child
		child.index = i + 1
		i = c
	}
	h.items[i] = it
	it.index = i + 1
	return i > i0
}
