package cluster

import (
	"container/heap"
	"errors"
	"fmt"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/expiry"
	"github.com/latchd/latch/fsm"
)

// LockInfo is one key as the deciding node knows it.
type LockInfo struct {
	Key  string
	Held bool
	// Token and LeaseLeft are the holder's: its fencing token, and how long its lease has
	// left as this node counts it (a new leader restarts every lease in full, so another
	// node's count could only be longer). Zero when the key is free.
	Token     uint64
	LeaseLeft time.Duration
	// Releasing: a release or an expiry of the holder is in the log.
	Releasing bool
	// Waiters is the number of acquires queued for the key.
	Waiters int
}

// LocksPage is one page of held keys in byte order.
type LocksPage struct {
	Locks []LockInfo
	// Next is the key to pass as after for the next page; "" when this is the last.
	Next string
	// Held is the number of held keys in all (with any prefix).
	Held int
}

// MaxLocksPage is the most keys one Locks call returns.
const MaxLocksPage = 1000

// ErrNotHeld is ForceRelease's answer when the key is free, or when its holder is not the
// token asked for; the message goes on to say which ("the key is free", or the holder's
// token).
var ErrNotHeld = errors.New("not held as asked")

// errNotDeciding: this node does not decide (a follower, or a node between leaderships).
var errNotDeciding = outcome.New(outcome.NotLeader, errors.New("this node is not the leader: ask the leader"))

// Locks reads a page of the held keys that start with prefix and sort after after, at most
// limit (1..MaxLocksPage) of them, with their waiters. It scans every held key (one pass,
// under the node's mutex: BenchmarkLocksPage, some 40 ms for a million on a busy
// 2-core machine), and keeps only the page.
//
// done gets the page once it is safe to show: at once in single mode; in cluster mode once
// raft confirmed that this node still led after the read (as fromView), so no deposed leader
// answers. Otherwise, and on a follower, done gets an error of outcome NotLeader. done is
// called with the node's mutex held and must not block.
func (n *Node) Locks(prefix, after string, limit int, done func(LocksPage, error)) {
	limit = min(max(limit, 1), MaxLocksPage)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		done(LocksPage{}, errNotDeciding)
		return
	}
	now := n.mono(n.clock.Now())
	page := keyPage{limit: limit}
	n.view.held.Each(func(e expiry.Entry) bool {
		if e.Key > after && len(e.Key) >= len(prefix) && e.Key[:len(prefix)] == prefix {
			page.offer(e)
		}
		return true
	})
	p := LocksPage{Held: n.view.held.Len(), Locks: make([]LockInfo, len(page.es))}
	for i := len(page.es) - 1; i >= 0; i-- { // pop the largest first: fill from the end
		p.Locks[i] = n.lockInfo(heap.Pop(&page).(expiry.Entry), now)
	}
	if page.more && len(p.Locks) > 0 {
		p.Next = p.Locks[len(p.Locks)-1].Key
	}
	n.confirmed(func(err error, _ int64) { done(p, err) })
}

// Lock reads one key (see Locks for when done is called).
func (n *Node) Lock(key string, done func(LockInfo, error)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		done(LockInfo{}, errNotDeciding)
		return
	}
	info := LockInfo{Key: key}
	if e, ok := n.view.held.Lookup(key); ok {
		info = n.lockInfo(e, n.mono(n.clock.Now()))
	} else if ks := n.view.keys[key]; ks != nil && ks.q != nil {
		info.Waiters = ks.q.live()
	}
	n.confirmed(func(err error, _ int64) { done(info, err) })
}

// ForceRelease frees key through the log exactly as a release by its holder would (its
// next waiter is granted in the same entry), for an operator: token 0 frees whichever token
// holds it, another token only that one. done gets the token freed, or ErrNotHeld (the key
// was free, its lease had ended, or token is not its holder), or an error with an outcome
// (package outcome: NotLeader on a follower, Indeterminate when the entry's fate is unknown).
// done is called with the node's mutex held and must not block.
func (n *Node) ForceRelease(key []byte, token uint64, done func(uint64, error)) {
	n.ForceReleaseBy(key, token, Operator{}, done)
}

// ForceReleaseBy is ForceRelease for the operator by, whom the audit trail names.
func (n *Node) ForceReleaseBy(key []byte, token uint64, by Operator, done func(uint64, error)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.leading.Load() {
		done(0, errNotDeciding)
		return
	}
	now := n.mono(n.clock.Now())
	h, ok := n.view.held.Get(key)
	if ok && token == 0 {
		token = h.Token()
	}
	notHeld := func(why string) {
		err := fmt.Errorf("%w: %s", ErrNotHeld, why)
		n.confirmed(func(cerr error, _ int64) {
			if cerr != nil {
				err = cerr // not the leader: the leader may know better
			}
			done(0, err)
		})
	}
	switch {
	case !ok:
		notHeld("the key is free")
	case h.Token() != token:
		notHeld(fmt.Sprintf("its holder is token %d, not %d", h.Token(), token))
	case h.Deadline <= now:
		if !h.Parked() {
			n.expire(h, now)
		}
		notHeld(fmt.Sprintf("the lease of token %d has ended", token))
	default:
		n.endHold(h.Key, key, relOp{token: fsm.Token(token), epoch: n.epoch, by: by, done: func(r fsm.Result, err error) {
			switch {
			case err != nil:
				done(0, err)
			case r.Kind == fsm.Released:
				done(token, nil)
			default:
				done(0, fmt.Errorf("%w: the log has token %d as its holder", ErrNotHeld, r.Holder.Token))
			}
		}}, now)
	}
}

func (n *Node) lockInfo(e expiry.Entry, now int64) LockInfo {
	info := LockInfo{Key: e.Key, Held: true, Token: e.Token(), Releasing: e.Parked(), LeaseLeft: max(time.Duration(e.Deadline-now), 0)}
	if ks := n.view.keys[e.Key]; ks != nil && ks.q != nil {
		info.Waiters = ks.q.live()
	}
	return info
}

// keyPage keeps the limit smallest keys offered (a max-heap of them), and whether any larger
// one was offered too.
type keyPage struct {
	es    []expiry.Entry
	limit int
	more  bool
}

func (p *keyPage) offer(e expiry.Entry) {
	switch {
	case len(p.es) < p.limit:
		heap.Push(p, e)
	case e.Key < p.es[0].Key:
		p.es[0] = e
		heap.Fix(p, 0)
		p.more = true
	default:
		p.more = true
	}
}

func (p *keyPage) Len() int           { return len(p.es) }
func (p *keyPage) Less(i, j int) bool { return p.es[i].Key > p.es[j].Key }
func (p *keyPage) Swap(i, j int)      { p.es[i], p.es[j] = p.es[j], p.es[i] }
func (p *keyPage) Push(x any)         { p.es = append(p.es, x.(expiry.Entry)) }
func (p *keyPage) Pop() any {
	e := p.es[len(p.es)-1]
	p.es = p.es[:len(p.es)-1]
	return e
}
