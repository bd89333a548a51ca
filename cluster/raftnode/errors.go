package raftnode

import (
	"errors"

	"github.com/hashicorp/raft"

	oc "github.com/latchd/latch/cluster/outcome" // "outcome" names a test type here
)

// Every error a Submit callback or a membership call returns carries exactly one outcome of
// package outcome (outcome.Of): Unavailable (NotLeader included: not applied, because this
// node is not the leader or has not yet established its leadership, Barrier and token
// floor, so it proposes nothing), Refused or Indeterminate, together with the cause (a raft
// error or one of the reasons below), so callers branch with errors.Is and log the whole
// message, which names the outcome once.

// Reasons wrapped in an outcome.
var (
	// ErrShutdown: the node is shutting down or has shut down.
	ErrShutdown = errors.New("raftnode: node is shut down")

	// ErrQueueFull: Config.MaxQueue commands are already waiting to be proposed. Shed load
	// before submitting more, or raise MaxQueue.
	ErrQueueFull = errors.New("raftnode: proposal queue is full: shed load or raise MaxQueue")

	// ErrGroupTooLarge: a SubmitGroup call had more commands than fit in one entry.
	ErrGroupTooLarge = errors.New("raftnode: group has more commands than MaxBatch: split it or raise MaxBatch")

	// ErrGroupRejected: another command of the same SubmitGroup call was rejected, so none of
	// the group was proposed.
	ErrGroupRejected = errors.New("raftnode: another command of its group was rejected")

	// ErrTimeout: raft did not answer within Config.ApplyTimeout.
	ErrTimeout = errors.New("raftnode: raft did not answer within ApplyTimeout")

	// ErrDataDirInUse: another process (or another Node in this one) has DataDir open.
	ErrDataDirInUse = errors.New("raftnode: the data directory is in use by another latch process: " +
		"stop that process, or give this one its own data directory")

	// ErrNotCaughtUp: AddVoterCaughtUp added the member as a nonvoter, but it had not caught
	// up with the log before the deadline, so it was not made a voter. Not a failed command:
	// the nonvoter is in the configuration and keeps replicating.
	ErrNotCaughtUp = errors.New("raftnode: not made a voter: the new member has not caught up with the log")

	// errStopped: an internal wait gave up because leadership (or the node) is going away.
	errStopped = errors.New("raftnode: stopped")
)

// classify maps the error of a raft future, with the log index it reported (0 when the entry
// was never given one), to an error of outcome Unavailable (NotLeader) or Indeterminate wrapping the cause, by
// what hashicorp/raft v1.8 has done with the entry when it returns each error:
//
//	raft.ErrNotLeader                         not applied (never dispatched)
//	raft.ErrLeadershipTransferInProgress      not applied (rejected before dispatch)
//	raft.ErrEnqueueTimeout                    not applied (never enqueued)
//	raft.ErrRaftShutdown, index 0             not applied (rejected by a shut-down node)
//	raft.ErrRaftShutdown, index > 0           maybe (committed, then shut down before applying)
//	raft.ErrLeadershipLost                    maybe (a later leader may commit it)
//	anything else (storage errors, restore)   maybe
//
// nil stays nil.
func classify(err error, index uint64) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return oc.New(oc.NotLeader, err)
	case errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrRaftShutdown) && index == 0:
		return unavailable(err)
	default:
		return indeterminate(err)
	}
}

// unavailable is the outcome Unavailable ("not applied"), because of reason.
func unavailable(reason error) error { return oc.New(oc.Unavailable, reason) }

// refused is the outcome Refused ("not applied, and never will be as it is"), because of
// reason: the command (or its group) itself cannot be carried out.
func refused(reason error) error { return oc.New(oc.Refused, reason) }

// indeterminate is the outcome Indeterminate ("may or may not have been applied"), because
// of reason.
func indeterminate(reason error) error { return oc.New(oc.Indeterminate, reason) }
