package raftnode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/latchd/latch/fsm"
)

// The pipeline answers the entries the proposer handed to raft, in the order it handed them.
//
// Fast path (every entry that commits while this node leads): raft's FSM goroutine applies
// the entry and calls applied (fsm.FSM.OnApplied), which finds it at the head of the queue by
// its data (raft hands the FSM the very slice the proposer gave raft.Apply) and calls its
// commands' done right there. No goroutine of latch's own sits between the commit and the
// answer.
//
// Slow path (the settle goroutine), for an entry at the head that the FSM may never apply
// while this node leads: one never proposed (preErr), one behind which a later entry was
// applied (raft never appended it: an enqueue timeout), and every entry once leadership is
// lost, the node shuts down, or ApplyTimeout passed since it was handed to raft. settle waits
// for that entry's future (bounded) and answers from it.
//
// Whoever answers holds busy, so answers leave in queue order: the FSM goroutine only records
// a result while settle holds it, and settle answers what was recorded before it lets go.
type pipeline struct {
	mu      sync.Mutex
	q       []*entry // handed to raft (or failed before), not yet answered; in order
	busy    bool     // someone is answering the head; the other only records
	done    bool     // the proposer has finished: settle returns once q is empty
	kick    chan struct{}
	drained chan struct{} // closed when settle returned

	fast, slow atomic.Uint64 // entries answered by the FSM goroutine, and by settle
}

// entry is one log entry's worth of commands. If preErr is set it was never proposed and every
// command gets preErr; otherwise data is what went to raft.Apply and f its future.
type entry struct {
	props    []fsm.Proposal
	preErr   error
	slot     bool // holds a window slot, given back when it is answered
	data     []byte
	f        raft.ApplyFuture
	seq      uint64 // its number in Node.proposed, if handed to raft
	start    time.Time
	overdue  *time.Timer // kicks settle at ApplyTimeout
	late     bool        // ApplyTimeout passed
	lost     bool        // a later entry was applied: this one never will be
	applied  bool        // the FSM applied it; resp is its response
	resp     any
	deadline time.Time
}

// push queues e, which the proposer just handed to raft (or failed to).
func (n *Node) push(e *entry) {
	p := &n.pipe
	if e.preErr == nil {
		e.overdue = time.AfterFunc(n.cfg.ApplyTimeout, func() {
			p.mu.Lock()
			e.late = true
			p.mu.Unlock()
			notify(p.kick)
		})
	}
	p.mu.Lock()
	p.q = append(p.q, e)
	p.mu.Unlock()
	if e.preErr != nil {
		notify(p.kick)
	}
}

// handed records e's future once raft.Apply returned: only then may settle wait for it.
func (n *Node) handed(e *entry, f raft.ApplyFuture, deadline time.Time) {
	p := &n.pipe
	p.mu.Lock()
	e.f, e.deadline = f, deadline
	wake := len(p.q) > 0 && p.q[0] == e && p.due(e, n)
	p.mu.Unlock()
	if wake {
		notify(p.kick)
	}
}

// applied is fsm.FSM.OnApplied, on raft's FSM goroutine.
func (n *Node) applied(l *raft.Log, resp any) {
	p := &n.pipe
	if len(l.Data) == 0 {
		return
	}
	p.mu.Lock()
	i := 0
	for i < len(p.q) && !sameData(p.q[i], l.Data) {
		i++
	}
	if i == len(p.q) { // not ours: another leader's, or proposed before a restart
		p.mu.Unlock()
		return
	}
	e := p.q[i]
	e.applied, e.resp = true, resp
	for _, skipped := range p.q[:i] {
		if !skipped.applied {
			skipped.lost = true
		}
	}
	if i > 0 || p.busy {
		p.mu.Unlock()
		notify(p.kick)
		return
	}
	p.busy = true
	p.mu.Unlock()
	p.fast.Add(n.answerApplied())
	p.mu.Lock()
	p.busy = false
	wake := len(p.q) > 0 && p.due(p.q[0], n)
	p.mu.Unlock()
	if wake {
		notify(p.kick)
	}
}

func sameData(e *entry, data []byte) bool {
	return len(e.data) > 0 && len(e.data) == len(data) && &e.data[0] == &data[0]
}

// answerApplied answers the entries at the head that the FSM applied, in order, and returns
// how many. The caller holds busy.
func (n *Node) answerApplied() (count uint64) {
	p := &n.pipe
	for {
		p.mu.Lock()
		if len(p.q) == 0 || !p.q[0].applied {
			p.mu.Unlock()
			return count
		}
		e := p.pop()
		p.mu.Unlock()
		n.answer(e, nil)
		count++
	}
}

// pop removes the head. The caller holds mu.
func (p *pipeline) pop() *entry {
	e := p.q[0]
	p.q[0] = nil
	p.q = p.q[1:]
	if len(p.q) == 0 {
		p.q = p.q[:0:0] // let the old backing array go
	}
	return e
}

// due reports whether settle must answer e (the head) itself: it was applied, or it never
// will be while this node leads and raft has given its future. The caller holds mu.
func (p *pipeline) due(e *entry, n *Node) bool {
	switch {
	case e.applied || e.preErr != nil:
		return true
	case e.f == nil: // raft.Apply has not returned yet
		return false
	}
	return e.lost || e.late || !n.leading.Load() || n.closing.Load()
}

// settle is the slow path's goroutine: whenever kicked, it answers the head for as long as
// the head is due, waiting for its future where the FSM did not apply it.
func (n *Node) settle() {
	p := &n.pipe
	defer close(p.drained)
	for {
		p.mu.Lock()
		if p.busy || len(p.q) == 0 || !p.due(p.q[0], n) {
			finished := p.done && len(p.q) == 0
			p.mu.Unlock()
			if finished {
				return
			}
			<-p.kick
			continue
		}
		p.busy = true
		e := p.pop()
		p.mu.Unlock()
		var err error
		if !e.applied {
			err = n.await(e)
		}
		n.answer(e, err)
		p.slow.Add(1 + n.answerApplied())
		p.mu.Lock()
		p.busy = false
		p.mu.Unlock()
	}
}

// finishPipeline tells settle that the proposer has pushed its last entry.
func (n *Node) finishPipeline() {
	n.pipe.mu.Lock()
	n.pipe.done = true
	n.pipe.mu.Unlock()
	notify(n.pipe.kick)
}

// await waits for e's future, bounded by e's deadline, or, once raft has shut down, by a
// short grace: raft answers nothing after its shutdown completed. A result the FSM recorded
// meanwhile counts as the future's.
func (n *Node) await(e *entry) error {
	if e.preErr != nil {
		return e.preErr
	}
	res := make(chan error, 1)
	go func() { res <- e.f.Error() }()
	timer := time.NewTimer(time.Until(e.deadline))
	defer timer.Stop()
	raftDown := n.raftDown
	var grace <-chan time.Time
	for {
		select {
		case err := <-res:
			if err == nil {
				e.resp = e.f.Response()
			}
			return classify(err, e.f.Index())
		case <-timer.C:
			select {
			case err := <-res: // answered as the deadline passed: the answer is definite
				if err == nil {
					e.resp = e.f.Response()
				}
				return classify(err, e.f.Index())
			default:
			}
			return indeterminate(fmt.Errorf("%w (%v)", ErrTimeout, n.cfg.ApplyTimeout))
		case <-grace:
			return indeterminate(fmt.Errorf("raft shut down without answering: %w", raft.ErrRaftShutdown))
		case <-raftDown:
			raftDown = nil
			grace = time.After(shutdownGrace)
		}
	}
}

// answer calls every command's done with e's result, in order, gives its window slot back and
// tells the confirmations (confirm.go) how it ended.
func (n *Node) answer(e *entry, err error) {
	if e.overdue != nil {
		e.overdue.Stop()
	}
	if e.slot {
		defer func() { <-n.slots }()
	}
	if e.seq != 0 {
		n.answered.Store(e.seq)
		if err == nil {
			if n.cfg.CommitLatency != nil {
				n.cfg.CommitLatency(time.Since(e.start))
			}
			// Committed: a quorum stored it in this leader's term, after it was handed to
			// raft. That confirms the leadership of every call made before (confirm.go).
			defer n.committed(e.seq)
		} else {
			defer notify(n.conf.settled)
		}
	}
	if err == nil {
		err = n.results(e)
	}
	if err != nil {
		for _, p := range e.props {
			p.Done(fsm.Result{}, err)
		}
	}
}

// results hands each command its result from e.resp, or returns why it cannot.
func (n *Node) results(e *entry) error {
	switch r := e.resp.(type) {
	case []fsm.Result:
		if len(r) != len(e.props) {
			return indeterminate(fmt.Errorf("FSM answered %d results for an entry of %d commands", len(r), len(e.props)))
		}
		for i, p := range e.props {
			p.Done(r[i], nil)
		}
		return nil
	case error:
		// fsm.FSM.Apply answers an error only once it halted (fsm.ErrHalted: an entry it
		// cannot decode), for an entry that is in the log and that replicas which read it
		// may apply: whether this one took effect anywhere is unknown.
		return indeterminate(r)
	default:
		return indeterminate(fmt.Errorf("unexpected FSM response %T", r))
	}
}
