package raftnode

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Structural validation of incoming Raft RPCs (the filter runs it after the membership
// check, filter.go). hashicorp/raft v1.8.0 trusts the fields of an RPC from a member: some
// make it panic, which ends the process, and others leave its log or configuration in a
// state no correct peer could have produced. The functions below refuse exactly the RPCs no
// correct raft v1.8 peer of a latch cluster sends (every latch node runs raft's default
// protocol version 3: config.go never sets ProtocolVersion), each rule with the raft code
// that makes it impossible or harmful. A false refusal would stall replication or an
// election, so a field raft only compares with its own state (a vote's LastLogIndex, a
// LeaderCommitIndex) is left alone unless no correct peer could send its value at all.
//
// Line numbers are raft v1.8.0's, in raft.go unless a file is named.
//
// Terms: every term a correct peer sends is at least 1. BootstrapCluster sets the term to 1
// and writes the first entry in term 1 (api.go:269-277); a candidate increments its term
// before it asks (electSelf 2004-2016) or asks for its term plus one (preElectSelf
// 2086-2095); a leader sends the term it leads in (replication.go:392, 572, 326). Every
// entry carries the term of the leader that appended it, so entry terms, snapshot terms and
// the last term of a non-empty log are at least 1 too, and no node's log holds a term above
// its current term (appendEntries persists a newer term, 1483, before it stores that term's
// entries, 1562). A leader that has just been deposed may, for a moment, send what it read
// from its log after entries of the newer term reached it; refusing that is harmless (the
// new leader sends them itself), and it is logged like any other refusal.
//
// Checking costs no allocation for an RPC that passes and carries no configuration entry:
// the leader's AppendEntries stream pays a loop over its entries (BenchmarkValidateAppendEntries).

// ErrMalformedRPC is why the filter refuses an RPC from a member: a field no correct
// hashicorp/raft peer sends, one that would crash raft or corrupt its state.
var ErrMalformedRPC = errors.New("malformed Raft RPC")

// malformed wraps ErrMalformedRPC with what is wrong; it allocates, so call it only on
// the failure path.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedRPC, fmt.Sprintf(format, args...))
}

// validate returns why cmd, an RPC command as raft's transport decoded it, must not reach
// raft, or nil. TimeoutNow carries nothing but its header, which raft checks itself
// (checkRPCHeader, raft.go:46-72).
func validate(cmd any) error {
	switch c := cmd.(type) {
	case *raft.AppendEntriesRequest:
		return validateAppendEntries(c)
	case *raft.RequestVoteRequest:
		return validateRequestVote(c)
	case *raft.RequestPreVoteRequest:
		return validateRequestPreVote(c)
	case *raft.InstallSnapshotRequest:
		return validateInstallSnapshot(c)
	}
	return nil
}

// validateAppendEntries checks an AppendEntries (or heartbeat) against what a leader builds
// in setupAppendEntries (replication.go:570-584): its term; PrevLogEntry and PrevLogTerm
// from setPreviousLog (587-611: both 0 before the first index, otherwise an index and its
// term, at least 1); entries read one by one from nextIndex on (setNewLogs, 614-630), so
// consecutive from PrevLogEntry+1, with terms that never decrease and never pass the
// leader's. What raft does with the rest:
//   - a nil entry (msgpack decodes one): appendEntries dereferences it (1530): a panic;
//   - indexes out of order: raft stores them as given (1562) and takes the last one as its
//     last index (1582). On an empty log raft-wal takes any first index, so an entry far
//     ahead leaves a hole that processLogs panics on once committed (1333, "log not found");
//     on a non-empty log raft-wal refuses the append, after raft may have cut its log
//     (1543);
//   - an entry type raft does not know: prepareLog panics once it is committed (1386);
//   - LogConfiguration data that does not decode: processConfigurationLogEntry panics
//     (1612, DecodeConfiguration configuration.go:362-367) just after the entry was stored.
//     Data that decodes to what checkConfiguration refuses (no voter, an empty or repeated
//     ID or address) would become the node's latest configuration (1612), and no leader
//     writes one (nextConfiguration and BootstrapCluster check theirs);
//   - LogAddPeerDeprecated and LogRemovePeerDeprecated: raft writes them only below protocol
//     version 3 (api.go:279-281, raft.go:1224-1228). Their data, through decodePeers, would
//     replace the configuration with voters whose IDs are addresses (configuration.go:329-348),
//     and a decode error returns (1616, 1575) after the entries were stored but before the
//     last index moved (1582).
func validateAppendEntries(a *raft.AppendEntriesRequest) error {
	if a.Term == 0 {
		return malformed("term 0")
	}
	if (a.PrevLogEntry == 0) != (a.PrevLogTerm == 0) {
		return malformed("previous entry %d with term %d", a.PrevLogEntry, a.PrevLogTerm)
	}
	if a.PrevLogTerm > a.Term {
		return malformed("previous entry's term %d above the leader's term %d", a.PrevLogTerm, a.Term)
	}
	index, term := a.PrevLogEntry, a.PrevLogTerm
	for i, e := range a.Entries {
		switch {
		case e == nil:
			return malformed("entry %d is nil", i)
		case e.Index == 0 || e.Index != index+1:
			return malformed("entry %d has index %d, want %d (consecutive after the previous entry %d)", i, e.Index, index+1, a.PrevLogEntry)
		case e.Term == 0 || e.Term < term || e.Term > a.Term:
			return malformed("entry %d (index %d) has term %d: terms run from the previous one (%d) up to the leader's (%d), at least 1",
				i, e.Index, e.Term, term, a.Term)
		}
		switch e.Type {
		case raft.LogCommand, raft.LogNoop, raft.LogBarrier:
		case raft.LogConfiguration:
			if err := checkConfigurationData(e.Data); err != nil {
				return malformed("entry %d (index %d): %v", i, e.Index, err)
			}
		case raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
			return malformed("entry %d (index %d) is a %v: protocol version 3 never writes one", i, e.Index, e.Type)
		default:
			return malformed("entry %d (index %d) has unknown type %d", i, e.Index, uint8(e.Type))
		}
		index, term = e.Index, e.Term
	}
	return nil
}

// validateRequestVote checks a vote request against electSelf (1999-2017): the candidate's
// term just incremented, so at least 1, and the end of its log from getLastEntry
// (state.go:167-174): an index with its term, both 0 for an empty log and both at least 1
// otherwise, that term no higher than the candidate's. Anything else raft compares with its
// own log (1731-1747), and any value passes or fails that correctly; a Term 0 would let a
// node that has no term yet persist a vote for term 0 (1749).
func validateRequestVote(r *raft.RequestVoteRequest) error {
	return checkCandidate(r.Term, r.LastLogIndex, r.LastLogTerm)
}

// validateRequestPreVote checks a pre-vote request as validateRequestVote does: preElectSelf
// (2073-2095) asks for its term plus one with the end of its log from getLastEntry, and
// requestPreVote compares them as requestVote does (1813-1828).
func validateRequestPreVote(r *raft.RequestPreVoteRequest) error {
	return checkCandidate(r.Term, r.LastLogIndex, r.LastLogTerm)
}

func checkCandidate(term, lastIndex, lastTerm uint64) error {
	switch {
	case term == 0:
		return malformed("term 0")
	case (lastIndex == 0) != (lastTerm == 0):
		return malformed("last entry %d with term %d", lastIndex, lastTerm)
	case lastTerm > term:
		return malformed("last entry's term %d above the candidate's term %d", lastTerm, term)
	}
	return nil
}

// validateInstallSnapshot checks an InstallSnapshot against sendLatestSnapshot
// (replication.go:299-336), which sends the leader's term and its newest snapshot's
// metadata: the version (raft creates only version 1: getSnapshotVersion raft.go:76-80, the
// file store's Create file_snapshot.go:163), the snapshot's index and term (a snapshot holds
// at least one applied entry: the FSM goroutine refuses to snapshot before one, fsm.go:219,
// and a leader sends one only for entries it compacted away after it), the size and the
// committed configuration with its index, never past the snapshot's (snapshot.go:174-183).
// What raft does with the rest (installSnapshot, 1837-1995):
//   - version 0: the configuration is taken from Peers (decodePeers, 1887), voters whose
//     IDs are addresses;
//   - a configuration that does not decode: DecodeConfiguration panics (1884), the finding
//     that started this (an empty one: "failed to decode configuration: EOF");
//   - one that decodes to what checkConfiguration refuses (an empty one: no voter) becomes
//     the node's latest and committed configuration (1960-1961) and is kept in the
//     snapshot's metadata, so it comes back after a restart;
//   - LastLogIndex 0, a term 0 or above the leader's, a configuration index past the
//     snapshot: applied, snapshot and configuration indexes that no log matches;
//   - a negative Size: the transport reads no data (net_transport.go:704, io.LimitReader),
//     so the snapshot's bytes are read as the next RPCs.
//
// The size has no upper bound here: a lock table has no size limit (--max-keys), and a
// refused snapshot would keep its follower from ever catching up.
func validateInstallSnapshot(r *raft.InstallSnapshotRequest) error {
	switch {
	case r.SnapshotVersion < 1 || r.SnapshotVersion > raft.SnapshotVersionMax:
		return malformed("snapshot version %d, want 1..%d", r.SnapshotVersion, raft.SnapshotVersionMax)
	case r.Term == 0:
		return malformed("term 0")
	case r.LastLogIndex == 0 || r.LastLogTerm == 0:
		return malformed("snapshot at index %d, term %d", r.LastLogIndex, r.LastLogTerm)
	case r.LastLogTerm > r.Term:
		return malformed("snapshot's term %d above the leader's term %d", r.LastLogTerm, r.Term)
	case r.ConfigurationIndex > r.LastLogIndex:
		return malformed("configuration index %d past the snapshot's index %d", r.ConfigurationIndex, r.LastLogIndex)
	case r.Size < 0:
		return malformed("size %d", r.Size)
	}
	if err := checkConfigurationData(r.Configuration); err != nil {
		return malformed("snapshot: %v", err)
	}
	return nil
}

// checkConfigurationData decodes a configuration as raft does (DecodeConfiguration, which
// panics on bad input, here under recover) and applies checkConfiguration's rules
// (configuration.go:192-219), which every configuration a leader writes passes
// (nextConfiguration and BootstrapCluster call it), and a known suffrage.
func checkConfigurationData(data []byte) (err error) {
	conf, err := decodeConfiguration(data)
	if err != nil {
		return err
	}
	return checkConfiguration(conf)
}

// decodeConfiguration is raft.DecodeConfiguration returning its panic as an error.
func decodeConfiguration(data []byte) (conf raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("configuration does not decode: %v", r)
		}
	}()
	return raft.DecodeConfiguration(data), nil
}

// checkConfiguration is raft's unexported checkConfiguration, plus a known suffrage. Its
// messages name servers by position: IDs and addresses are the sender's bytes.
func checkConfiguration(conf raft.Configuration) error {
	ids := make(map[raft.ServerID]int, len(conf.Servers))
	addrs := make(map[raft.ServerAddress]int, len(conf.Servers))
	voters := 0
	for i, s := range conf.Servers {
		switch {
		case s.ID == "":
			return fmt.Errorf("configuration: server %d has an empty ID", i)
		case s.Address == "":
			return fmt.Errorf("configuration: server %d has an empty address", i)
		case s.Suffrage != raft.Voter && s.Suffrage != raft.Nonvoter && s.Suffrage != raft.Staging:
			return fmt.Errorf("configuration: server %d has unknown suffrage %d", i, int(s.Suffrage))
		}
		if j, dup := ids[s.ID]; dup {
			return fmt.Errorf("configuration: servers %d and %d have the same ID", j, i)
		}
		if j, dup := addrs[s.Address]; dup {
			return fmt.Errorf("configuration: servers %d and %d have the same address", j, i)
		}
		ids[s.ID], addrs[s.Address] = i, i
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters == 0 {
		return fmt.Errorf("configuration has no voter (%d servers)", len(conf.Servers))
	}
	return nil
}
