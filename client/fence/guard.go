package fence

import (
	"container/list"
	"sync"
)

// DefaultLimit is the number of resources a Guard made with a limit of 0 remembers.
const DefaultLimit = 1 << 16

// Guard keeps the high-water mark of each resource in the memory of one process, for a
// resource that lives in that process (a file it owns, an in-memory store it serves). It
// is safe for concurrent use. Writes to one resource are serialized: Do holds the
// resource's lock from the check until the mark is recorded, so an accepted write can
// never be overtaken by an older one. Writes to different resources run in parallel.
//
// Memory is bounded. A Guard remembers at most its limit of resources (plus those with a
// write in progress). When one more would exceed it, it forgets the resource written least
// recently and folds that resource's mark into its floor: the highest mark among the
// resources it forgot. A resource it does not remember accepts only tokens at or above the
// floor. So forgetting never lets a stale write through; at worst it refuses the holder of
// an old token on a forgotten resource (a *StaleError with Floor set). Since latch's tokens
// grow across all keys, a floor above a holder's token comes from a resource written after
// that holder's grant: pick a limit above the number of resources written within your
// longest lease, and that cannot happen.
//
// The marks live in memory: a restarted process starts with empty marks and a floor of 0.
// A resource that outlives its process must keep its mark next to its data instead (Table
// for a database; docs/fencing.md for object stores and files).
type Guard struct {
	limit int

	mu    sync.Mutex // guards the fields below, and entry.refs and entry.elem
	marks map[string]*entry
	lru   *list.List // of *entry, most recently used at the front
	floor uint64
}

// entry is one remembered resource. mu is held across a Do (check, write, record); mark is
// written under mu. The Guard forgets an entry only when refs is 0, that is when no Do
// holds or waits for mu, and reads its mark then under Guard.mu: the Do that wrote it
// released mu and then decremented refs under Guard.mu, so the write happened before.
type entry struct {
	resource string
	mu       sync.Mutex
	mark     uint64
	floored  bool // mark is the floor the entry started at, not a token it accepted
	refs     int
	elem     *list.Element
}

// NewGuard returns a Guard that remembers at most limit resources (DefaultLimit if limit is
// 0 or negative).
func NewGuard(limit int) *Guard {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Guard{limit: limit, marks: make(map[string]*entry), lru: list.New()}
}

// Do applies the rule to one write: if token is at least the highest token accepted for
// resource, it runs write and, when write returns nil, records token as the resource's
// mark, all under the resource's lock. A stale token gets a *StaleError (errors.Is(err,
// ErrStale)) and write is not run. When write returns an error, Do returns it and the mark
// stays where it was, as a rolled-back transaction leaves it; write must then have changed
// nothing. An invalid token (0, above MaxToken) is ErrInvalidToken.
//
// write runs while the resource is locked: keep it short, and do not call the Guard for the
// same resource from inside it (that deadlocks).
func (g *Guard) Do(resource string, token uint64, write func() error) error {
	if err := CheckToken(token); err != nil {
		return err
	}
	e := g.hold(resource)
	defer g.drop(e)
	e.mu.Lock()
	defer e.mu.Unlock()
	if token < e.mark {
		return &StaleError{Resource: resource, Token: token, Seen: e.mark, Floor: e.floored}
	}
	if write != nil {
		if err := write(); err != nil {
			return err
		}
	}
	e.mark, e.floored = token, false
	return nil
}

// Accept checks token against resource's mark and records it, in one step, with no write:
// Do with a nil write. Use it when the write is made atomic with the check some other way.
func (g *Guard) Accept(resource string, token uint64) error {
	return g.Do(resource, token, nil)
}

// Mark returns the highest token accepted for resource, and whether the Guard remembers
// the resource; for one it does not, it returns the floor and false.
func (g *Guard) Mark(resource string) (uint64, bool) {
	g.mu.Lock()
	e, ok := g.marks[resource]
	if !ok {
		defer g.mu.Unlock()
		return g.floor, false
	}
	e.refs++
	g.mu.Unlock()
	defer g.drop(e)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mark, true
}

// Len is the number of resources the Guard remembers now.
func (g *Guard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.marks)
}

// hold finds or makes the entry of resource and takes a reference to it, so that it is not
// forgotten while in use. A new entry starts at the floor.
func (g *Guard) hold(resource string) *entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.marks[resource]
	if !ok {
		e = &entry{resource: resource, mark: g.floor, floored: g.floor > 0}
		e.elem = g.lru.PushFront(e)
		g.marks[resource] = e
	} else {
		g.lru.MoveToFront(e.elem)
	}
	e.refs++
	return e
}

// drop gives back a reference taken by hold and forgets the least recently used entries no
// one holds while the Guard remembers more than its limit.
func (g *Guard) drop(e *entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.refs--
	for el := g.lru.Back(); el != nil && len(g.marks) > g.limit; {
		old := el.Value.(*entry)
		el = el.Prev()
		if old.refs > 0 {
			continue
		}
		g.lru.Remove(old.elem)
		delete(g.marks, old.resource)
		g.floor = max(g.floor, old.mark)
	}
}
