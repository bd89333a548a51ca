package cluster

import (
	"hash/maphash"
	"math"

	"github.com/latchd/latch/fsm"
)

// holders is the view's record of every holder it knows: per held key the holder's token and
// lease deadline, found by key and ordered by deadline, in 36 bytes a key plus an index of
// about 5 to 8 (a map of pointers to heap items cost about 110). The key string is the lock
// table's own. It is a 4-ary min-heap of values (soonest deadline first, ties: lower token)
// and an open-addressing index from key to heap position, which every heap move keeps exact;
// each heap position also names its index slot, so that a move never hashes a key.
//
// A holder may be parked: a release or expiry of it is in the log. It keeps its token and
// deadline, but is never due (the sweep leaves it alone) until it is armed again or removed.
//
// Not safe for concurrent use; the node's mutex guards it. At most math.MaxUint32-1 holders.
type holders struct {
	heap   []holder
	slot   []uint32 // slot[p] names the index slot that points to heap[p]
	shards [indexShards]shard
	seed   maphash.Seed
}

// holder is one entry. tok carries the token in its low 63 bits (fsm.MaxToken is 2^63-1) and
// parked in its top bit, so that an entry stays 32 bytes.
type holder struct {
	deadline int64
	tok      uint64
	key      string
}

const parkedBit = 1 << 63

// Tokens must leave the top bit free (this fails to compile if fsm.MaxToken grows past it).
const _ = uint64(parkedBit - 1 - fsm.MaxToken)

func (e *holder) token() fsm.Token { return fsm.Token(e.tok &^ parkedBit) }
func (e *holder) parked() bool     { return e.tok&parkedBit != 0 }

// due is the deadline the heap orders by: a parked holder is never due.
func (e *holder) due() int64 {
	if e.parked() {
		return math.MaxInt64
	}
	return e.deadline
}

func before(a, b *holder) bool {
	if da, db := a.due(), b.due(); da != db {
		return da < db
	}
	return a.token() < b.token()
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

func (h *holders) at(name uint32) (*shard, int) {
	return &h.shards[name>>slotBits], int(name & slotMask)
}

func newHolders() holders { return holders{seed: maphash.MakeSeed()} }

func (h *holders) len() int { return len(h.heap) }

// get returns key's holder.
func (h *holders) get(key []byte) (holder, bool) {
	hash := maphash.Bytes(h.seed, key)
	sh := &h.shards[hash>>56]
	if sh.n == 0 {
		return holder{}, false
	}
	for i := sh.home(hash); sh.pos[i] != 0; i = sh.next(i) {
		if p := sh.pos[i]; p != gone && sh.tag[i] == uint8(hash) && h.heap[p-1].key == string(key) {
			return h.heap[p-1], true
		}
	}
	return holder{}, false
}

// lookup is get for a key the caller has as a string.
func (h *holders) lookup(key string) (holder, bool) {
	if p := h.find(key); p >= 0 {
		return h.heap[p], true
	}
	return holder{}, false
}

// find returns key's heap position, or -1.
func (h *holders) find(key string) int {
	hash := maphash.String(h.seed, key)
	sh := &h.shards[hash>>56]
	if sh.n == 0 {
		return -1
	}
	for i := sh.home(hash); sh.pos[i] != 0; i = sh.next(i) {
		if p := sh.pos[i]; p != gone && sh.tag[i] == uint8(hash) && h.heap[p-1].key == key {
			return int(p - 1)
		}
	}
	return -1
}

// set makes tok key's holder with deadline, armed, in place of any holder it had, and
// reports whether key had none.
func (h *holders) set(key string, tok fsm.Token, deadline int64) bool {
	if p := h.find(key); p >= 0 {
		h.heap[p].tok, h.heap[p].deadline = uint64(tok), deadline
		h.fix(p)
		return false
	}
	if len(h.heap) >= math.MaxUint32-1 {
		panic("cluster: more than 2^32-2 holders in the view")
	}
	hash := maphash.String(h.seed, key)
	sh := &h.shards[hash>>56]
	if (sh.n+sh.dead+1)*5 > len(sh.pos)*4 { // keep the load, gone slots included, at most 0.8
		h.resize(int(hash>>56), sh.n+1)
	}
	p := len(h.heap)
	if p == cap(h.heap) {
		// Grow by an eighth, not append's quarter or more: the heap is most of the view.
		c := max(64, p+p/8)
		h.heap = append(make([]holder, 0, c), h.heap...)
		h.slot = append(make([]uint32, 0, c), h.slot...)
	}
	h.heap = append(h.heap, holder{deadline: deadline, tok: uint64(tok), key: key})
	h.slot = append(h.slot, uint32(hash>>56)<<slotBits|uint32(sh.insert(hash, uint32(p+1))))
	h.up(p)
	return true
}

// park marks key's holder parked (never due) if its token is tok; arm gives key's holder
// deadline and makes it due again. Both do nothing for a key without a holder.
func (h *holders) park(key string, tok fsm.Token) {
	if p := h.find(key); p >= 0 && h.heap[p].token() == tok {
		h.heap[p].tok |= parkedBit
		h.fix(p)
	}
}

func (h *holders) arm(key string, deadline int64) {
	if p := h.find(key); p >= 0 {
		h.heap[p].tok &^= parkedBit
		h.heap[p].deadline = deadline
		h.fix(p)
	}
}

// remove forgets key's holder, and reports whether it had one.
func (h *holders) remove(key string) bool {
	p := h.find(key)
	if p < 0 {
		return false
	}
	h.unindex(h.slot[p])
	last := len(h.heap) - 1
	if p != last {
		h.move(last, p)
	}
	h.heap[last] = holder{}
	h.heap, h.slot = h.heap[:last], h.slot[:last]
	if p != last {
		h.fix(p)
	}
	if c := cap(h.heap); c > 1024 && len(h.heap) < c/4 {
		h.heap = append(make([]holder, 0, c/2), h.heap...)
		h.slot = append(make([]uint32, 0, c/2), h.slot...)
	}
	return true
}

// peek returns the soonest holder that is due by now, if any.
func (h *holders) peek(now int64) (holder, bool) {
	if len(h.heap) == 0 || h.heap[0].due() > now {
		return holder{}, false
	}
	return h.heap[0], true
}

// fix restores the heap order around position p.
func (h *holders) fix(p int) {
	if p > 0 && before(&h.heap[p], &h.heap[(p-1)/4]) {
		h.up(p)
		return
	}
	h.down(p)
}

// up moves the entry at p towards the root.
func (h *holders) up(p int) {
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
func (h *holders) down(p int) {
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
func (h *holders) move(from, to int) { h.place(to, h.heap[from], h.slot[from]) }

// place puts x, indexed at the slot named name, at position p.
func (h *holders) place(p int, x holder, name uint32) {
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
func (h *holders) unindex(name uint32) {
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
func (h *holders) resize(si, n int) {
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
			h.slot[p-1] = base | uint32(sh.insert(maphash.String(h.seed, h.heap[p-1].key), p))
		}
	}
}
