package cluster

import (
	"errors"

	"github.com/latchd/latch/fsm"
)

// Proposer applies lock-table commands through the replicated log (cluster mode). The node
// declares it; cluster/member wires the Raft proposer in.
type Proposer interface {
	// Submit proposes cmd. done is called exactly once, never from inside Submit, and the
	// done calls of all commands come from one goroutine in log order: with the command's
	// result, or with an error of outcome Unavailable (NotLeader), Refused or Indeterminate
	// (package outcome maps each to its wire reason). Submit may keep cmd.Key.
	Submit(cmd fsm.Command, done func(fsm.Result, error))
}

// GroupProposer is a Proposer that can put several commands in one log entry, in order, all
// or none: a release and the grant to the key's next waiter then cost one disk sync.
type GroupProposer interface {
	Proposer
	SubmitGroup(ps ...fsm.Proposal)
}

// StateReader reads the applied lock table (the Raft FSM) between applies.
type StateReader interface {
	Read(fn func(*fsm.Table))
}

// Confirmer confirms that this node still leads (cluster mode). The node declares it;
// cluster/member wires raftnode's Confirm in.
type Confirmer interface {
	// Confirm calls done(nil) once the log has confirmed that this node still leads, at a
	// moment after the call, in the term it led in when Confirm was called; otherwise it calls
	// done with an error of outcome NotLeader. done is called exactly once, never from inside
	// Confirm.
	Confirm(done func(error))
}

// Replicated makes a node run in cluster mode. Its commands go through Propose and it starts
// as a follower: it decides nothing until Lead.
type Replicated struct {
	Propose Proposer
	State   StateReader
	// Confirm is how the leader makes sure of an answer it read from its view (release N,
	// acquire T) before it sends it: see doc.go, What the leader answers from its view.
	Confirm Confirmer

	// ExpiryInFlight is the most expiries the leader's expiry lane has proposed and not yet
	// seen answered; it goes on as results come back. Keep it well below the proposer's
	// queue (raftnode's MaxQueue, 16384): an expiry may carry a grant with it, and client
	// commands need the rest. 0 means DefaultExpiryInFlight.
	ExpiryInFlight int
	// ExpiryGroup is the most commands (expiries and the grants behind them) the lane puts
	// in one group, which shares one log entry; at most the proposer's MaxBatch (256).
	// 0 means DefaultExpiryGroup.
	ExpiryGroup int

	// Remembered, if set, is the cluster features this member saw switched on before (its
	// data dir keeps them; the switch is one-way): offered to clients with those of the
	// applied log, so that a restarted node does not offer latch/1 until its log is replayed.
	// An extend is applied only when the leader's applied log has the switch.
	Remembered func() fsm.Features
}

// Defaults of the expiry lane: 2048 expiries in flight (with their grants at most a quarter
// of raftnode's default queue, and no more than half of its default pipeline of 16 entries
// of 256, so a client command finds a free slot), groups of 128 commands (two to a default
// entry of 256). BenchmarkMassExpiry chose 2048 over 4096: as fast, half the probe's p99.
const (
	DefaultExpiryInFlight = 2048
	DefaultExpiryGroup    = 128
)

// errEpochChanged: leadership was confirmed, but the node stopped deciding (or started a new
// epoch) between reading its view and the confirmation, so what it read is not vouched for.
var errEpochChanged = errors.New("leadership changed while the answer was being confirmed")
