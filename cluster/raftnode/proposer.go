package raftnode

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	oc "github.com/latchd/latch/cluster/outcome" // "outcome" names a test type here
	"github.com/latchd/latch/fsm"
)

// Proposal is one command and the callback that receives its outcome.
type Proposal struct {
	Cmd  fsm.Command
	Done func(fsm.Result, error)
}

// proposal is a queued command. group is, on the first command of a SubmitGroup call, the
// number of commands that must go into the same entry with it (1 for Submit); 0 on the rest.
type proposal struct {
	cmd   fsm.Command
	done  func(fsm.Result, error)
	group int
}

// rejected is a command answered without a round through raft.
type rejected struct {
	done func(fsm.Result, error)
	err  error
}

// queue holds the commands waiting for the proposer, and the rejections waiting for the
// dispatcher. Everything is guarded by mu; every critical section is a few appends.
type queue struct {
	mu      sync.Mutex
	items   []proposal // FIFO, waiting to be packed
	count   int        // commands accepted and not yet packed (items plus the proposer's hand)
	closed  bool       // the proposer has stopped: reject everything
	rejects []rejected // answered by the dispatcher, promptly
	gone    bool       // the dispatcher has stopped: answer rejects on a new goroutine
	signal  chan struct{}
}

// entry is one log entry's worth of commands on its way from the proposer to the
// dispatcher. If preErr is set it was never proposed and every command gets preErr.
// Otherwise the waiter goroutine sets err, index and resp, then closes done.
type entry struct {
	props    []proposal
	preErr   error
	slot     bool   // holds a window slot the dispatcher gives back
	seq      uint64 // its number in Node.proposed, if handed to raft
	deadline time.Time
	done     chan struct{}
	err      error
	index    uint64
	resp     any
}

// Submit proposes cmd and calls done with its result once the entry carrying it is applied
// on this leader, or with an error of outcome Unavailable, Refused or Indeterminate.
//
// It never blocks and never calls done on the caller's goroutine, so it may be called while
// holding a mutex that done takes. done is called exactly once, from the node's dispatcher
// goroutine, which calls every done one at a time (after Shutdown has finished, rejections
// are answered on a new goroutine each). For commands that were proposed, done calls come in
// log order: a submitter's commands are answered in the order it submitted them, and the
// results are those of that order. A command rejected up front (see below) may be answered
// before commands submitted earlier; it changed nothing.
//
// Rejected up front: a command that fails cmd.Validate (outcome Refused, wrapping
// fsm.ErrInvalidCommand); with outcome Unavailable: any command while this node is not
// the established leader (NotLeader, naming the leader if known); more than MaxQueue
// commands waiting to be packed (ErrQueueFull: the queue is bounded, Submit sheds load
// rather than block); a node shutting down (ErrShutdown).
//
// Submit copies cmd.Key: the caller may reuse it when Submit returns. done must return
// promptly, since it holds up every later result, and must not call Shutdown, which waits
// for the dispatcher; it may call Submit.
func (n *Node) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	n.SubmitGroup(Proposal{Cmd: cmd, Done: done})
}

// SubmitGroup is Submit for commands that must share one log entry, in the given order (a
// release and the grant to the key's next waiter: one disk sync, and never one without the
// other). Every command gets its own done call, in order. The group is all or nothing up
// front: if one command is rejected, all are (ErrGroupRejected for the others), and a
// group larger than MaxBatch is rejected with ErrGroupTooLarge.
func (n *Node) SubmitGroup(ps ...Proposal) {
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
			items[i] = proposal{cmd: p.Cmd, done: orNoop(p.Done)}
			items[i].cmd.Key = bytes.Clone(p.Cmd.Key)
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

// reject hands commands to the dispatcher to be answered: each with errs[i], or all with err.
func (n *Node) reject(ps []Proposal, errs []error, err error) {
	rs := make([]rejected, len(ps))
	for i, p := range ps {
		rs[i] = rejected{done: orNoop(p.Done), err: err}
		if errs != nil {
			rs[i].err = errs[i]
		}
	}
	n.q.mu.Lock()
	gone := n.q.gone
	if !gone {
		n.q.rejects = append(n.q.rejects, rs...)
	}
	n.q.mu.Unlock()
	if gone {
		go answer(rs)
		return
	}
	notify(n.rejectSig)
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
			n.inflight <- &entry{props: left, preErr: unavailable(ErrShutdown)}
		}
		close(n.inflight)
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
		props := append([]proposal(nil), buf[pos:pos+k]...)
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
				cmds = append(cmds, p.cmd)
				size += 16 + len(p.cmd.Key)
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
			start := time.Now() // the commit latency counts the enqueue too
			e.seq = n.proposed.Add(1)
			f := n.raft.Apply(data, n.cfg.ApplyTimeout)
			// The commit wait is a budget of its own, after the enqueue (which may itself take
			// up to ApplyTimeout and then fail with ErrEnqueueTimeout: not applied).
			e.deadline = time.Now().Add(n.cfg.ApplyTimeout)
			e.done = make(chan struct{})
			go e.wait(f, start, n.cfg.CommitLatency)
			n.entries.Add(1)
			n.commands.Add(uint64(len(props)))
		}
		n.applyMu.Unlock()
		n.inflight <- e
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

// wait runs on its own goroutine per entry: raft futures have no channel, and can stay
// unanswered forever after a shutdown (hashicorp/raft issue 498), so the dispatcher waits
// on done with a deadline instead of calling Error itself. A goroutine whose future never
// resolves stays blocked; there are at most MaxInFlight of them, and only after Shutdown.
// A successful entry's commit latency goes to observe (nil: not recorded).
func (e *entry) wait(f raft.ApplyFuture, start time.Time, observe func(time.Duration)) {
	e.err = f.Error()
	e.index = f.Index()
	if e.err == nil {
		e.resp = f.Response()
		if observe != nil {
			observe(time.Since(start))
		}
	}
	close(e.done)
}

// dispatch is the dispatcher goroutine: it settles entries in proposal order, each wait
// bounded by the entry's deadline, and answers rejections promptly in between.
func (n *Node) dispatch() {
	defer close(n.dispatchDone)
	for {
		select {
		case e, ok := <-n.inflight:
			if !ok {
				n.q.mu.Lock()
				n.q.gone = true
				rs := n.q.rejects
				n.q.rejects = nil
				n.q.mu.Unlock()
				answer(rs)
				return
			}
			n.settle(e)
		case <-n.rejectSig:
			n.answerRejects()
		}
	}
}

// settle waits for e's future (bounded), then calls every command's done, in order.
func (n *Node) settle(e *entry) {
	if e.slot {
		defer func() { <-n.slots }()
	}
	err := e.preErr
	if err == nil {
		err = n.await(e)
	}
	if e.seq != 0 {
		n.answered.Store(e.seq)
		if err == nil {
			// Committed: a quorum stored it in this leader's term, after it was handed to
			// raft. That confirms the leadership of every call made before (confirm.go).
			defer n.committed(e.seq)
		} else {
			defer notify(n.conf.settled)
		}
	}
	if err != nil {
		for _, p := range e.props {
			p.done(fsm.Result{}, err)
		}
		return
	}
	switch r := e.resp.(type) {
	case []fsm.Result:
		if len(r) != len(e.props) {
			err = indeterminate(fmt.Errorf("FSM answered %d results for an entry of %d commands (log index %d)", len(r), len(e.props), e.index))
			break
		}
		for i, p := range e.props {
			p.done(r[i], nil)
		}
		return
	case error:
		// fsm.FSM.Apply answers an error only once it halted (fsm.ErrHalted: an entry it
		// cannot decode), for an entry that is in the log and that replicas which read it
		// may apply: whether this one took effect anywhere is unknown.
		err = indeterminate(r)
	default:
		err = indeterminate(fmt.Errorf("unexpected FSM response %T (log index %d)", r, e.index))
	}
	for _, p := range e.props {
		p.done(fsm.Result{}, err)
	}
}

// await waits for e.done until e's deadline, or, once raft has shut down, for a short grace:
// raft answers nothing after its shutdown completed. It answers rejections while it waits.
func (n *Node) await(e *entry) error {
	timer := time.NewTimer(time.Until(e.deadline))
	defer timer.Stop()
	raftDown := n.raftDown
	var grace <-chan time.Time
	for {
		select {
		case <-e.done:
			return classify(e.err, e.index)
		case <-timer.C:
			select {
			case <-e.done: // answered as the deadline passed: the answer is definite
				return classify(e.err, e.index)
			default:
			}
			return indeterminate(fmt.Errorf("%w (%v)", ErrTimeout, n.cfg.ApplyTimeout))
		case <-grace:
			return indeterminate(fmt.Errorf("raft shut down without answering: %w", raft.ErrRaftShutdown))
		case <-raftDown:
			raftDown = nil
			grace = time.After(shutdownGrace)
		case <-n.rejectSig:
			n.answerRejects()
		}
	}
}

func (n *Node) answerRejects() {
	n.q.mu.Lock()
	rs := n.q.rejects
	n.q.rejects = nil
	n.q.mu.Unlock()
	answer(rs)
}

func answer(rs []rejected) {
	for _, r := range rs {
		r.done(fsm.Result{}, r.err)
	}
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
