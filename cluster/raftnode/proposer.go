package raftnode

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	oc "github.com/latchd/latch/cluster/outcome" // "outcome" names a test type here
	"github.com/latchd/latch/fsm"
)

// proposal is a queued command. group is, on the first command of a SubmitGroup call, the
// number of commands that must go into the same entry with it (1 for Submit); 0 on the rest.
type proposal struct {
	fsm.Proposal
	group int
}

// queue holds the commands waiting for the proposer. Everything is guarded by mu; every
// critical section is a few appends.
type queue struct {
	mu     sync.Mutex
	items  []proposal // FIFO, waiting to be packed
	count  int        // commands accepted and not yet packed (items plus the proposer's hand)
	closed bool       // the proposer has stopped: reject everything
	signal chan struct{}
}

// Submit proposes cmd and calls done with its result once the entry carrying it is applied
// on this leader, or with an error of outcome Unavailable, Refused or Indeterminate.
//
// It never blocks and never calls done on the caller's goroutine, so it may be called while
// holding a mutex that done takes. done is called exactly once: for a command that was
// proposed, by the pipeline (pipeline.go: on raft's FSM goroutine as it applies the entry, or
// on the settle goroutine when the entry failed), one at a time and in log order, so that a
// submitter's commands are answered in the order it submitted them, with the results of that
// order; for a command rejected up front (see below), on a goroutine of its own, possibly
// before commands submitted earlier (it changed nothing).
//
// Rejected up front: a command that fails cmd.Validate (outcome Refused, wrapping
// fsm.ErrInvalidCommand); with outcome Unavailable: any command while this node is not
// the established leader (NotLeader, naming the leader if known); more than MaxQueue
// commands waiting to be packed (ErrQueueFull: the queue is bounded, Submit sheds load
// rather than block); a node shutting down (ErrShutdown).
//
// Submit copies cmd.Key: the caller may reuse it when Submit returns. done must return
// promptly, since it holds up raft's applies and every later result, and must not call
// Shutdown, which waits for the pipeline, nor wait for anything raft's FSM goroutine does
// (a Barrier, an Apply's future); it may call Submit.
func (n *Node) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	n.SubmitGroup(fsm.Proposal{Cmd: cmd, Done: done})
}

// SubmitGroup is Submit for commands that must share one log entry, in the given order (a
// release and the grant to the key's next waiter: one disk sync, and never one without the
// other). Every command gets its own done call, in order. The group is all or nothing up
// front: if one command is rejected, all are (ErrGroupRejected for the others), and a
// group larger than MaxBatch is rejected with ErrGroupTooLarge.
func (n *Node) SubmitGroup(ps ...fsm.Proposal) {
	if len(ps) == 0 {
		return
	}
	errs := make([]error, len(ps))
	bad := false
	for i, p := range ps {
		if err := p.Cmd.Validate(); err != nil {
			errs[i], bad = refused(err), true
		}
	}
	if !bad && len(ps) > n.cfg.MaxBatch {
		bad = true
		for i := range errs {
			errs[i] = refused(fmt.Errorf("%w (%d commands, MaxBatch %d)", ErrGroupTooLarge, len(ps), n.cfg.MaxBatch))
		}
	}
	if bad {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = refused(ErrGroupRejected)
			}
		}
		n.reject(ps, errs, nil)
		return
	}

	var reason error
	switch { // checked again under the lock; this spares the copies
	case n.closing.Load():
		reason = ErrShutdown
	case !n.leading.Load():
		reason = oc.NotLeader
	default:
		items := make([]proposal, len(ps))
		for i, p := range ps {
			items[i] = proposal{Proposal: fsm.Proposal{Cmd: p.Cmd, Done: orNoop(p.Done)}}
			items[i].Cmd.Key = bytes.Clone(p.Cmd.Key)
		}
		items[0].group = len(ps)
		n.q.mu.Lock()
		switch {
		case n.q.closed || n.closing.Load():
			reason = ErrShutdown
		case !n.leading.Load():
			reason = oc.NotLeader
		case n.q.count+len(ps) > n.cfg.MaxQueue:
			reason = ErrQueueFull
		default:
			n.q.items = append(n.q.items, items...)
			n.q.count += len(ps)
		}
		n.q.mu.Unlock()
	}
	if reason == nil {
		notify(n.q.signal)
		return
	}
	var err error
	if reason == oc.NotLeader {
		err = n.notLeaderErr()
	} else {
		err = unavailable(reason)
	}
	n.reject(ps, nil, err)
}

// reject answers commands on a goroutine of their own: each with errs[i], or all with err.
func (n *Node) reject(ps []fsm.Proposal, errs []error, err error) {
	go func() {
		for i, p := range ps {
			e := err
			if errs != nil {
				e = errs[i]
			}
			orNoop(p.Done)(fsm.Result{}, e)
		}
	}()
}

// propose is the proposer goroutine: it packs queued commands into entries of at most
// MaxBatch commands, never splitting a group, and proposes each with raft.Apply as soon as
// a window slot is free, without waiting for earlier entries to commit.
func (n *Node) propose() {
	defer close(n.proposeDone)
	var (
		buf  []proposal // taken from the queue; buf[pos:] not yet packed
		pos  int
		cmds []fsm.Command // encode scratch
	)
	finish := func() {
		n.q.mu.Lock()
		n.q.closed = true
		left := append(buf[pos:len(buf):len(buf)], n.q.items...)
		n.q.items, n.q.count = nil, 0
		n.q.mu.Unlock()
		if len(left) > 0 {
			ps := make([]fsm.Proposal, len(left))
			for i, p := range left {
				ps[i] = p.Proposal
			}
			n.push(&entry{props: ps, preErr: unavailable(ErrShutdown)})
		}
		n.finishPipeline()
	}
	for {
		if pos == len(buf) {
			clear(buf)
			n.q.mu.Lock()
			buf, n.q.items = n.q.items, buf[:0]
			n.q.mu.Unlock()
			pos = 0
			if len(buf) == 0 {
				select {
				case <-n.q.signal:
					continue
				case <-n.stopPropose:
					finish()
					return
				}
			}
		}
		select {
		case n.slots <- struct{}{}:
		case <-n.stopPropose:
			finish()
			return
		}
		k := packLen(buf[pos:], n.cfg.MaxBatch)
		if k == 0 { // a group over MaxBatch: SubmitGroup rejects those, but never spin
			k = buf[pos].group
		}
		props := make([]fsm.Proposal, k)
		for i, p := range buf[pos : pos+k] {
			props[i] = p.Proposal
		}
		clear(buf[pos : pos+k])
		pos += k
		n.q.mu.Lock()
		n.q.count -= k
		n.q.mu.Unlock()

		e := &entry{props: props, slot: true}
		n.applyMu.Lock()
		switch {
		case n.closing.Load():
			e.preErr = unavailable(ErrShutdown)
		case !n.leading.Load():
			e.preErr = n.notLeaderErr()
		default:
			cmds = cmds[:0]
			size := 1
			for _, p := range props {
				cmds = append(cmds, p.Cmd)
				size += 16 + len(p.Cmd.Key)
			}
			data, err := fsm.AppendBatch(make([]byte, 0, size), cmds)
			clear(cmds)
			if err != nil { // cannot happen: every command passed Validate
				e.preErr = unavailable(err)
				break
			}
			if testHookBeforeApply != nil {
				testHookBeforeApply()
			}
			e.start = time.Now() // the commit latency counts the enqueue too
			e.seq = n.proposed.Add(1)
			e.data = data
			// The entry is queued before raft has it, so the FSM always finds it.
			n.push(e)
			f := n.raft.Apply(data, n.cfg.ApplyTimeout)
			// The commit wait is a budget of its own, after the enqueue (which may itself take
			// up to ApplyTimeout and then fail with ErrEnqueueTimeout: not applied).
			n.handed(e, f, time.Now().Add(n.cfg.ApplyTimeout))
			n.entries.Add(1)
			n.commands.Add(uint64(len(props)))
		}
		n.applyMu.Unlock()
		if e.preErr != nil {
			n.push(e)
		}
	}
}

// testHookBeforeApply, when set by a test, runs in the proposer between its leadership check
// and raft.Apply; testHookBeforeRaftRestore runs in Restore just before raft.Restore.
var testHookBeforeApply, testHookBeforeRaftRestore func()

// packLen returns how many of the queued commands go into the next entry: whole groups,
// at most max commands (a group never exceeds max: SubmitGroup rejects larger ones).
func packLen(q []proposal, max int) int {
	k := 0
	for k < len(q) {
		g := q[k].group
		if k+g > max {
			break
		}
		k += g
	}
	return k
}

// orNoop returns done, or a callback that does nothing if done is nil.
func orNoop(done func(fsm.Result, error)) func(fsm.Result, error) {
	if done == nil {
		return func(fsm.Result, error) {}
	}
	return done
}

// notify does a non-blocking send on a signal channel of capacity 1.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
