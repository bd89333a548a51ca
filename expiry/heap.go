package expiry

import (
	"hash/maphash"
	"math"
)

// Heap is the deciding node's record of every holder it knows: per held key the holder's
// token and lease deadline, found by key and ordered by deadline, in 36 bytes a key plus an
// index of about 5 to 8 (a map of pointers to heap items cost about 110). The key string is
// the lock table's own. It is a 4-ary min-heap of values (soonest deadline first, ties: lower
// token) and an open-addressing index from key to heap position, which every heap move keeps
// exact; each heap position also names its index slot, so that a move never hashes a key.
//
// A holder may be parked: a release or expiry of it is in flight. It keeps its token and
// deadline, but is never due (the sweep leaves it alone) until it is armed again or removed.
//
// Not safe for concurrent use; its owner serialises access. At most math.MaxUint32-1
// holders. Make one with NewHeap.
type Heap struct {
	heap   []Entry
	slot   []uint32 // slot[p] names the index slot that points to heap[p]
	shards [indexShards]shard
	seed   maphash.Seed
}

// Entry is one holder: its lease deadline, its token and its key. The token lives in the low
// 63 bits of tok and parked in the top bit, so that an entry stays 32 bytes: tokens must be
// below 2^63 (the lock table's largest is 2^63-1).
type Entry struct {
	Deadline int64  // on the caller's clock; the heap orders by it
	tok      uint64 // the token, and the parked bit
	Key      string // the locked key, shared with the lock table
}

const parkedBit = 1 << 63

// MaxToken is the largest token an Entry can carry.
const MaxToken = parkedBit - 1

// Token is the holder's token.
func (e Entry) Token() uint64 { return e.tok &^ parkedBit }

// Parked reports whether a release or expiry of the holder is in flight: it is never due.
func (e Entry) Parked() bool { return e.tok&parkedBit != 0 }

// due is the deadline the heap orders by: a parked holder is never due.
func (e *Entry) due() int64 {
	if e.Parked() {
		return math.MaxInt64
	}
	return e.Deadline
}

func before(a, b *Entry) bool {
	if da, db := a.due(), b.due(); da != db {
		return da < db
	}
	return a.Token() < b.Token()
}

// indexShards splits the index so that growing it rehashes a small part of the keys at a
// time (about 4,000 at a million keys), never all of them under the node's mutex.
const indexShards = 256

// shard is one part of the index, linear probing: pos is heap position+1 of the holder whose
// key hashes there (0: empty, gone: a holder was removed there), tag 8 more bits of that hash,
// so that a probe rarely has to read a key it does not want. A removal leaves gone, which
// costs no hashing; a resize clears them.
type shard struct {
	pos  []uint32
	tag  []uint8
	n    int // slots that point to a holder
	dead int // slots that are gone
}

// gone marks a slot whose holder was removed: probes go on past it, inserts reuse it. It is
// never a heap position+1.
const gone = math.MaxUint32

// A slot name is shard<<slotBits | slot; a shard has fewer than 1<<slotBits slots.
const (
	slotBits = 24
	slotMask = 1<<slotBits - 1
)

func (h *Heap) at(name uint32) (*shard, int) {
	return &h.shards[name>>slotBits], int(name & slotMask)
}

// NewHeap returns an empty heap (its index hash has a seed of its own).
func NewHeap() Heap { return Heap{seed: maphash.MakeSeed()} }

func (h *Heap) Len() int { return len(h.heap) }

// Get returns key's holder.
func (h *Heap) Get(key []byte) (Entry, bool) {
	hash := maphash.Bytes(h.seed, key)
	sh := &h.shards[hash>>56]
	if sh.n == 0 {
		return Entry{}, false
	}
	for i := sh.home(hash); sh.pos[i] != 0; i = sh.next(i) {
		if p := sh.pos[i]; p != gone && sh.tag[i] == uint8(hash) && h.heap[p-1].Key == string(key) {
			return h.heap[p-1], true
		}
	}
	return Entry{}, false
}

// Lookup is Get for a key the caller has as a string.
func (h *Heap) Lookup(key string) (Entry, bool) {
	if p := h.find(key); p >= 0 {
		return h.heap[p], true
	}
	return Entry{}, false
}

// find returns key's heap position, or -1.
func (h *Heap) find(key string) int { return h.findHashed(key, maphash.String(h.seed, key)) }

// findHashed is find for a key whose hash the caller has.
func (h *Heap) findHashed(key string, hash uint64) int {
	sh := &h.shards[hash>>56]
	if sh.n == 0 {
		return -1
	}
	for i := sh.home(hash); sh.pos[i] != 0; i = sh.next(i) {
		if p := sh.pos[i]; p != gone && sh.tag[i] == uint8(hash) && h.heap[p-1].Key == key {
			return int(p - 1)
		}
	}
	return -1
}

// Set makes tok key's holder with deadline, armed, in place of any holder it had, and
// reports whether key had none.
func (h *Heap) Set(key string, tok uint64, deadline int64) bool {
	hash := maphash.String(h.seed, key)
	if p := h.findHashed(key, hash); p >= 0 {
		h.heap[p].tok, h.heap[p].Deadline = uint64(tok), deadline
		h.fix(p)
		return false
	}
	if len(h.heap) >= math.MaxUint32-1 {
		panic("cluster: more than 2^32-2 holders in the view")
	}
	sh := &h.shards[hash>>56]
	if (sh.n+sh.dead+1)*5 > len(sh.pos)*4 { // keep the load, gone slots included, at most 0.8
		h.resize(int(hash>>56), sh.n+1)
	}
	p := len(h.heap)
	if p == cap(h.heap) {
		// Grow by an eighth, not append's quarter or more: the heap is most of the view.
		c := max(64, p+p/8)
		h.heap = append(make([]Entry, 0, c), h.heap...)
		h.slot = append(make([]uint32, 0, c), h.slot...)
	}
	h.heap = append(h.heap, Entry{Deadline: deadline, tok: tok, Key: key})
	h.slot = append(h.slot, uint32(hash>>56)<<slotBits|uint32(sh.insert(hash, uint32(p+1))))
	h.up(p)
	return true
}

// Grow makes room for n more holders, so that the next n Sets of new keys neither copy the
// heap nor rebuild the index (a new leader calls it before it fills its view from the table,
// where growing step by step takes most of the time). It changes nothing the heap holds.
func (h *Heap) Grow(n int) {
	if n <= 0 {
		return
	}
	if want := len(h.heap) + n; want > cap(h.heap) {
		h.heap = append(make([]Entry, 0, want), h.heap...)
		h.slot = append(make([]uint32, 0, want), h.slot...)
	}
	// Keys spread evenly over the shards. resize sizes a shard for a load of 0.6 and it grows
	// at 0.8, so a shard sized for its even share takes a third more before it grows: far
	// beyond how unevenly a large n falls (a small one grows cheaply anyway).
	per := n/indexShards + 1
	for si := range h.shards {
		sh := &h.shards[si]
		if (sh.n+sh.dead+per)*5 > len(sh.pos)*4 {
			h.resize(si, sh.n+per)
		}
	}
}

// Park marks key's holder parked (never due) if its token is tok; Arm gives key's holder
// deadline and makes it due again. Both do nothing for a key without a holder.
func (h *Heap) Park(key string, tok uint64) {
	if p := h.find(key); p >= 0 && h.heap[p].Token() == tok {
		h.heap[p].tok |= parkedBit
		h.fix(p)
	}
}

func (h *Heap) Arm(key string, deadline int64) {
	if p := h.find(key); p >= 0 {
		h.heap[p].tok &^= parkedBit
		h.heap[p].Deadline = deadline
		h.fix(p)
	}
}

// Retime gives key's holder deadline if its token is tok, and leaves it parked or armed as
// it was: an extended lease, whose holder may have a release in flight.
func (h *Heap) Retime(key string, tok uint64, deadline int64) {
	if p := h.find(key); p >= 0 && h.heap[p].Token() == tok {
		h.heap[p].Deadline = deadline
		h.fix(p)
	}
}

// Remove forgets key's holder, and reports whether it had one.
func (h *Heap) Remove(key string) bool {
	p := h.find(key)
	if p < 0 {
		return false
	}
	h.unindex(h.slot[p])
	last := len(h.heap) - 1
	if p != last {
		h.move(last, p)
	}
	h.heap[last] = Entry{}
	h.heap, h.slot = h.heap[:last], h.slot[:last]
	if p != last {
		h.fix(p)
	}
	if c := cap(h.heap); c > 1024 && len(h.heap) < c/4 {
		h.heap = append(make([]Entry, 0, c/2), h.heap...)
		h.slot = append(make([]uint32, 0, c/2), h.slot...)
	}
	return true
}

// Each calls fn with every holder, in no particular order, until fn returns false. fn must
// not change the heap.
func (h *Heap) Each(fn func(Entry) bool) {
	for i := range h.heap {
		if !fn(h.heap[i]) {
			return
		}
	}
}

// Peek returns the soonest holder that is due by now, if any.
func (h *Heap) Peek(now int64) (Entry, bool) {
	if len(h.heap) == 0 || h.heap[0].due() > now {
		return Entry{}, false
	}
	return h.heap[0], true
}

// Next returns the deadline of the soonest holder that is not parked, if any: when the next
// expiry falls due.
func (h *Heap) Next() (int64, bool) {
	if len(h.heap) == 0 || h.heap[0].Parked() {
		return 0, false
	}
	return h.heap[0].Deadline, true
}

// fix restores the heap order around position p.
func (h *Heap) fix(p int) {
	if p > 0 && before(&h.heap[p], &h.heap[(p-1)/4]) {
		h.up(p)
		return
	}
	h.down(p)
}

// up moves the entry at p towards the root.
func (h *Heap) up(p int) {
	x, name := h.heap[p], h.slot[p]
	for p > 0 {
		parent := (p - 1) / 4
		if !before(&x, &h.heap[parent]) {
			break
		}
		h.move(parent, p)
		p = parent
	}
	h.place(p, x, name)
}

// down moves the entry at p towards the leaves.
func (h *Heap) down(p int) {
	x, name := h.heap[p], h.slot[p]
	n := len(h.heap)
	for {
		c := 4*p + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < n; j++ {
			if before(&h.heap[j], &h.heap[m]) {
				m = j
			}
		}
		if !before(&h.heap[m], &x) {
			break
		}
		h.move(m, p)
		p = m
	}
	h.place(p, x, name)
}

// move copies the entry at from to to, and points its index slot there.
func (h *Heap) move(from, to int) { h.place(to, h.heap[from], h.slot[from]) }

// place puts x, indexed at the slot named name, at position p.
func (h *Heap) place(p int, x Entry, name uint32) {
	h.heap[p], h.slot[p] = x, name
	sh, s := h.at(name)
	sh.pos[s] = uint32(p + 1)
}

// home is the slot a hash starts probing at: bits 24..55 of it scaled to the shard's size
// (the top 8 choose the shard, the low 8 are the tag).
func (sh *shard) home(hash uint64) int {
	return int(uint64(uint32(hash>>24)) * uint64(len(sh.pos)) >> 32)
}

func (sh *shard) next(i int) int {
	if i++; i == len(sh.pos) {
		return 0
	}
	return i
}

// insert files pos under hash in the first empty or gone slot and returns that slot. The
// key must not be in the shard.
func (sh *shard) insert(hash uint64, pos uint32) int {
	i := sh.home(hash)
	for sh.pos[i] != 0 && sh.pos[i] != gone {
		i = sh.next(i)
	}
	if sh.pos[i] == gone {
		sh.dead--
	}
	sh.pos[i], sh.tag[i] = pos, uint8(hash)
	sh.n++
	return i
}

// unindex marks the slot named name gone, and shrinks its shard once it is seven eighths
// empty (not sooner: a mass expiry would rebuild it over and over).
func (h *Heap) unindex(name uint32) {
	sh, i := h.at(name)
	sh.pos[i], sh.tag[i] = gone, 0
	sh.n--
	sh.dead++
	if len(sh.pos) > 16 && sh.n*8 < len(sh.pos) {
		h.resize(int(name>>slotBits), sh.n)
	}
}

// resize rebuilds shard si for n entries at a load of 0.6 (it grows past 0.8 and shrinks
// below 0.125).
func (h *Heap) resize(si, n int) {
	size := max(8, n*5/3+1)
	if size > slotMask {
		panic("cluster: a shard of the view's index outgrew its slot names")
	}
	sh := &h.shards[si]
	old := sh.pos
	base := uint32(si) << slotBits
	sh.pos, sh.tag, sh.n, sh.dead = make([]uint32, size), make([]uint8, size), 0, 0
	for _, p := range old {
		if p != 0 && p != gone {
			h.slot[p-1] = base | uint32(sh.insert(maphash.String(h.seed, h.heap[p-1].Key), p))
		}
	}
}
