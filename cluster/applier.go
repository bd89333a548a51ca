package cluster

import (
	"bytes"

	"github.com/latchd/latch/fsm"
)

// applier is how a state transition reaches the lock table: the one seam between the two
// modes. The node decides; the applier applies.
//
// Either way the result goes to Node.applied, with the node's mutex held, the key the command
// carried (a copy it may keep), the decision to continue (then) and the node's clock at that
// moment. then is a value, not a closure, so that single mode allocates nothing for it.
type applier interface {
	// apply applies cmd and hands its result to Node.applied: at once, before apply returns
	// (local), or later, in log order, from the proposer's result goroutine (replicated).
	// The caller holds the node's mutex and may reuse cmd.Key once apply returns.
	apply(cmd fsm.Command, then then)
	// begin and end bracket commands that belong in one log entry (a release or expiry and
	// the grant to the key's next waiter behind it): all or none, one disk sync.
	begin()
	end()
	// grouped is how many commands begin has collected so far (local: always 0).
	grouped() int
	// read calls fn with the applied table. The caller holds the node's mutex.
	read(fn func(*fsm.Table))
	// confirm calls fn, with the node's mutex held, once it is sure that what the node read
	// from its view before the call could not have been changed by another leader: at once
	// (local: there is no other), or once raft confirmed this node still leads (replicated),
	// with err nil; or with an error of outcome NotLeader. The caller holds the mutex.
	confirm(fn func(err error, now int64))
	// features are the cluster-wide features in force (fsm.Features): a single-mode node has
	// every one this build knows; a cluster node those its applied log switched on. It needs
	// no lock of the caller's.
	features() fsm.Features
	// offered are the features the node offers clients: features, and in cluster mode those
	// the member remembers were switched on (Replicated.Remembered). No lock either.
	offered() fsm.Features
}

// localApplier is single mode: the node owns the table and applies each command in place,
// under its mutex, with no hand-off.
type localApplier struct {
	n     *Node
	table *fsm.Table
}

func (a *localApplier) apply(cmd fsm.Command, then then) {
	a.n.applied(cmd.Key, then, a.table.ApplyCommand(cmd), nil, a.n.mono(a.n.clock.Now()))
}

func (a *localApplier) begin() {}
func (a *localApplier) end()   {}

func (a *localApplier) grouped() int { return 0 }

func (a *localApplier) read(fn func(*fsm.Table)) { fn(a.table) }

func (a *localApplier) confirm(fn func(error, int64)) { fn(nil, a.n.mono(a.n.clock.Now())) }

func (a *localApplier) features() fsm.Features { return fsm.KnownFeatures }

func (a *localApplier) offered() fsm.Features { return fsm.KnownFeatures }

// replicatedApplier is cluster mode: commands are proposed to the replicated log and their
// results come back, in log order, once the leader applies their entry.
type replicatedApplier struct {
	n        *Node
	rep      *Replicated
	grouping bool           // between begin and end
	group    []fsm.Proposal // what begin collected
}

func (a *replicatedApplier) apply(cmd fsm.Command, then then) {
	cmd.Key = bytes.Clone(cmd.Key) // the proposer keeps it; the caller's buffer is reused
	done := func(r fsm.Result, err error) {
		a.n.mu.Lock()
		defer a.n.mu.Unlock()
		a.n.applied(cmd.Key, then, r, err, a.n.mono(a.n.clock.Now()))
	}
	if a.grouping {
		a.group = append(a.group, fsm.Proposal{Cmd: cmd, Done: done})
		return
	}
	a.rep.Propose.Submit(cmd, done)
}

func (a *replicatedApplier) begin() { a.grouping = true }

// end proposes what begin collected: as one entry when the proposer can.
func (a *replicatedApplier) end() {
	a.grouping = false
	g := a.group
	a.group = nil
	if gp, ok := a.rep.Propose.(GroupProposer); ok && len(g) > 1 {
		gp.SubmitGroup(g...)
		return
	}
	for _, p := range g {
		a.rep.Propose.Submit(p.Cmd, p.Done)
	}
}

func (a *replicatedApplier) grouped() int { return len(a.group) }

// read reads the FSM's table (its lock, not the node's, guards it).
func (a *replicatedApplier) read(fn func(*fsm.Table)) { a.rep.State.Read(fn) }

func (a *replicatedApplier) features() (f fsm.Features) {
	a.rep.State.Read(func(t *fsm.Table) { f = t.Features() })
	return f
}

func (a *replicatedApplier) offered() fsm.Features {
	f := a.features()
	if a.rep.Remembered != nil {
		f |= a.rep.Remembered()
	}
	return f
}

func (a *replicatedApplier) confirm(fn func(error, int64)) {
	a.rep.Confirm.Confirm(func(err error) {
		a.n.mu.Lock()
		defer a.n.mu.Unlock()
		fn(err, a.n.mono(a.n.clock.Now()))
	})
}

// then is the decision a command's result continues: exactly one of its fields is set, the
// one of kind.
type then struct {
	kind fsm.CommandKind
	acq  acqOp // CmdAcquire
	rel  relOp // CmdRelease
	exp  expOp // CmdExpire
	ext  extOp // CmdExtend
}

// expOp is an expiry being decided.
type expOp struct {
	key   string
	token fsm.Token
	epoch uint64
	lane  bool // proposed by the expiry lane (expire.go), which counts it in flight
}

// applied continues the decision behind a command with its result. The caller holds n.mu.
func (n *Node) applied(key []byte, t then, r fsm.Result, err error, now int64) {
	switch t.kind {
	case fsm.CmdAcquire:
		if t.acq.w == nil {
			n.pending-- // counted by proposeAcquire; a waiter is counted until it is retired
		}
		n.acquired(key, t.acq, r, err, now)
	case fsm.CmdRelease:
		n.released(key, t.rel, r, err, now)
	case fsm.CmdExpire:
		n.expired(t.exp, r, err, now)
	case fsm.CmdExtend:
		n.extendedResult(key, t.ext, r, err, now)
	}
	// A result may have given the view an earlier deadline (a grant, a holder re-armed):
	// make sure the leader's expiry timer is set for it.
	n.armExpiry(now)
}
