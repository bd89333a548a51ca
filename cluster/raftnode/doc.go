// Package raftnode wires latch's replicated lock table (package fsm) into hashicorp/raft:
// the stores, the transport, bootstrap and join, a batching proposer, and the leadership
// signals the node (package cluster) builds on. Package cluster/member wires the two
// together; raftnode and cluster never import each other.
//
// # What it owns
//
//   - Raft wiring: the log in raft-wal (wal/, one fsync per append) behind a 512-entry
//     raft.LogCache, term and vote in raft-boltdb (raft.db, fsync always on), a file
//     snapshot store keeping 2 snapshots, all in Config.DataDir; the transport
//     (Config.Transport, or a raft.NetworkTransport built on Config.Stream).
//   - The promise (promise.go, walscan.go, check.go): promised.json keeps the term, the
//     vote, the log's durable end and the newest snapshot apart from raft.db and wal/, and
//     every start verifies every log segment and refuses (ErrDataDirBroken) a directory
//     that holds less than the node promised its peers; docs/architecture.md lists the
//     cases and the window that remains.
//   - The directory's format (format.go): format.json names it and the version that last
//     started there; a directory of a newer format is refused (ErrDataDirNewer) first.
//   - Bootstrap and join: a restart never bootstraps; a new node bootstraps a one-node
//     cluster (Bootstrap), the identical InitialCluster, or waits to be added (AddVoter).
//   - The token floor: Config.TokenFloor enters the log as an fsm.CmdFloor entry proposed
//     by each new leader after its Barrier when the FSM's counter is below it; every FSM
//     starts from 0 so that a node replaying the log decides as the others did.
//   - The batching proposer: Submit and SubmitGroup (DESIGN below).
//   - Leadership signals: OnLeader after the Barrier and the floor, OnFollower when that
//     leadership ends, OnLeaderChange whenever the known leader changes (raft's leader
//     observation, pushed); IsLeader, Leader.
//   - Operations: AddVoter, AddNonvoter, RemoveServer, Servers, Status, Ready, Snapshot,
//     Shutdown (leadership transfer first).
//   - Who may speak Raft: the filter in front of the transport and CheckPeer (below).
//
// # What it must never do
//
//   - Decide lock semantics: who waits, who is granted next, when a lease ends. It proposes
//     the commands it is given and reports their results; package cluster decides.
//   - Read FSM state without the FSM's lock: only through fsm.FSM's methods (Read, Holder,
//     LastToken, Len, AppliedIndex, Err), never the table itself.
//   - Wait on a raft future without a deadline: futures can stay unanswered forever after a
//     shutdown (hashicorp/raft issue 498), and the timeout raft takes bounds only the
//     enqueue. Every wait runs the future's Error on a helper goroutine and selects on it,
//     a timer (ApplyTimeout) and a stop channel.
//   - Turn on NoSync or BatchApplyCh: the first makes votes non-durable (two leaders in one
//     term after a power loss), the second orphans futures on shutdown.
//
// # Errors
//
// Every failure of a command or a membership change carries exactly one outcome of package
// cluster/outcome, with the cause: Unavailable (never appended: nothing changed, safe to
// retry) or Indeterminate (appended, or may have been: the client must be told the outcome
// is unknown), by what hashicorp/raft v1.8 does with each error (the table at classify,
// errors.go). A command refused because this node does not lead is NotLeader, which is
// Unavailable too, and one that can never be carried out as it is (it fails fsm's
// validation, or its group is too large or holds such a command) is Refused. An error
// response from the FSM means it halted (fsm.ErrHalted: it met an entry it cannot decode,
// this one or an earlier one): the entry is in the log and replicas that read it apply it,
// so Indeterminate.
//
// # Who may speak Raft
//
// hashicorp/raft takes AppendEntries, InstallSnapshot and TimeoutNow from any sender that
// reaches its transport (it refuses only votes from outside its configuration), so one
// forged AppendEntries with LeaderCommitIndex set commits an entry on every node. raft runs
// on a filter (filter.go) around the real transport: every RPC whose sender, the ID in its
// RPC header, is not a voter or nonvoter of the node's latest configuration (the one raft
// uses, committed or not) is answered with an error at once and never reaches raft:
// AppendEntries, heartbeats on the transport's fast path included, RequestVote,
// RequestPreVote, InstallSnapshot (its data read off the connection first, up to 256 MiB)
// and TimeoutNow. Each refused sender is logged once a minute and counted
// (Status.RefusedRPCs). CheckPeer applies the same set, by ID and configured address, to the
// peer port's Raft connections (package peer's StreamLayer Admission, wired by cmd).
//
// The set is cached: an atomic map, refreshed every second and, at most every 50 ms, when an
// unknown sender shows up, from GetConfiguration (which in raft v1.8 reads an atomic copy and
// never waits for raft's main loop). The leader's AppendEntries stream costs a map lookup.
//
// Exceptions, for bootstrap and joining:
//   - A node with an empty configuration (never in a cluster, waiting to be added) cannot
//     know the leader that will add it. Told whom to expect (ExpectPeers: cmd passes the
//     member list it reads from the --join target before it asks to be added), it takes RPCs
//     from those members only (and from a leader elected since, if one of them vouches for
//     it). Told nothing (a node added by an operator with AddVoter, no --join), it takes
//     every RPC but TimeoutNow from anyone holding the peer credential: while it waits, such
//     a holder could feed it a forged log, which its first real leader then has to overwrite.
//   - The leader appends the configuration entry that adds a node before it sends that node
//     anything, and followers learn it with the next AppendEntries, so members know a new
//     member before it first speaks to them (a nonvoter never does; a voter campaigns only
//     after it has the entry that made it one).
//   - A member that lagged behind a membership change (down while a node was added, which
//     may lead by now) does not know the new node, and refused, could never catch up from it.
//     It asks the members it knows (Config.Vouch; cmd asks them over the admin channel, at
//     their configured addresses) and admits a sender one of them has in its configuration,
//     for a minute at a time, until its own configuration has it. If every member it knows is
//     gone, nobody can vouch: wipe it and add it again.
//
// What a member sends is checked too (validate.go), before raft sees it: hashicorp/raft
// v1.8 trusts an RPC's fields, and some make it panic, which ends the process, or leave its
// log or configuration in a state no correct peer produces. Refused, each with the raft code
// that makes it impossible or harmful cited next to the rule:
//   - AppendEntries: term 0; a previous entry 0 with a term or an entry with term 0; entries
//     that are nil, not consecutive from the previous entry on, with term 0, a term below
//     the one before or above the leader's; entry types raft does not know (it panics when
//     it commits one), the deprecated add- and remove-peer entries (protocol version 3 never
//     writes them), configuration entries that do not decode (raft panics while it appends
//     them) or fail raft's checkConfiguration (no voter, an empty or repeated ID or address)
//     or hold an unknown suffrage;
//   - InstallSnapshot: a version other than 1, term 0, a snapshot at index 0 or in term 0 or
//     above the leader's term, a configuration index past the snapshot, a negative size, a
//     configuration that is empty, does not decode (the panic "failed to decode
//     configuration: EOF") or fails the same checks;
//   - RequestVote and RequestPreVote: term 0, a last entry 0 with a term or the reverse, a
//     last term above the term asked for. Fields raft only compares with its own log pass.
//
// A refused RPC is answered with an error at once (a snapshot's data read off first, as
// above), logged once a minute per sender with the reason, and counted in Status.RefusedRPCs
// and Status.MalformedRPCs. A correct peer never sends one, so a refusal means a faulty node
// or someone posing as a member. The check allocates nothing for an RPC without a
// configuration entry: the leader's AppendEntries stream pays a loop over its entries.
//
// What remains trusted: the sender ID inside an RPC is a claim, and so is the identity a
// peer states in the handshake unless per-node TLS certificates bind it (package peer: What
// binds what). Anyone holding the peer credential can still claim to be a member and send
// well-formed RPCs as that member: a higher term, a vote, entries and snapshots that pass
// every structural check. The filter stops strangers, removed nodes, tools and RPCs that
// would crash a node, not a holder of the credential who lies. Keep the peer credential to
// the nodes.
//
// # DESIGN: the proposer
//
// Many small commands must share disk syncs, and each client must learn its own command's
// result in log order, so that package cluster's waiter bookkeeping stays exact. One queue,
// one proposer goroutine and the pipeline (pipeline.go) do it, and raft's own FSM goroutine
// answers:
//
//	Submit ──> queue ──> proposer ──raft.Apply──> raft ──commit──> FSM goroutine: apply,
//	  │      (bounded)      │                                          OnApplied ──> done(result)
//	  │                     └── pipeline (entries in proposal order) ──┘
//	  │                                 └─ settle goroutine: entries the FSM never applies here
//	  └── rejections (invalid, not leader, full, shut down): done on a goroutine of their own
//
// In turn:
//
//   - Submit validates the command (fsm.Command.Validate), copies its key and appends it to a
//     FIFO under a short mutex, or rejects it. It never blocks, so package cluster may call it
//     under its own mutex. The queue holds at most MaxQueue commands waiting to be packed;
//     beyond that Submit rejects with ErrQueueFull rather than block (backpressure belongs to
//     the node's admission gates, which keep it far below). Rejections do not go through raft
//     and are answered on a goroutine of their own, never on the caller's, possibly before
//     the results of commands submitted earlier: they changed nothing.
//   - The proposer takes the whole queue at once and packs it into entries of up to MaxBatch
//     commands (fsm.AppendBatch; a SubmitGroup's commands always share an entry), puts each
//     at the pipeline's tail and calls raft.Apply as soon as one of MaxInFlight window slots
//     is free: it does not wait for an entry to commit before proposing the next. raft's
//     leader loop stores whatever entries are queued in one write, and replication pipelines
//     them, so under load one disk sync covers hundreds of commands, and batches grow with
//     the load by themselves (the commands that arrive during one sync fill the next entry).
//     If the node is not the established leader (or is shutting down), it does not propose
//     and the entry carries the rejection instead.
//   - raft's FSM goroutine applies each committed entry (fsm.FSM.ApplyBatch) and then calls
//     the FSM's OnApplied hook, which is the pipeline's applied: on the leader that proposed
//     it, the entry is the pipeline's head (raft hands the FSM the very data slice the
//     proposer gave raft.Apply, which is how it is found), and its commands' done callbacks
//     run right there, in order, with their fsm.Result; the slot is freed. No goroutine waits
//     per entry. An entry the FSM will not apply while this node leads is answered by the
//     settle goroutine from its future, bounded by the entry's deadline (ApplyTimeout after
//     the enqueue) or, once raft has shut down, by a short grace: an entry of a leader that
//     lost its leadership, or of a node shutting down, one past its deadline (Indeterminate),
//     one never proposed, and one raft never appended (a later entry was applied first).
//     Whoever answers holds the pipeline's busy flag, so done calls never run concurrently,
//     come in log order, and a done that blocks holds up everything after it, raft's applies
//     included: it must return promptly and never wait for raft.
//
// The whole batch shares one fate: if an entry's outcome is unknown, it is unknown for each
// of its commands. Measured with BenchmarkSubmit3Nodes (3 nodes in one process on loopback
// TCP, bolt fsync on, a 2-vCPU VM whose disk syncs a 4 KiB write in ~0.1 ms): 1 closed-loop
// client ~1,600 submits/s (one entry per command, ~0.6 ms each); 16 clients ~16 commands per
// entry, ~20,000/s; 256 clients ~245 per entry, 150,000-300,000/s; 2,048 clients ~430,000/s.
// Real disks sync slower: batches then grow and the per-client rate drops.
//
// # Leadership
//
// raft blocks on its NotifyCh, so one monitor goroutine drains it at once and starts or stops
// exactly one leader loop at a time (Consul's pattern): the next loop starts only after the
// previous one has returned. A leader loop first commits a Barrier (every entry any earlier
// leader acknowledged is then applied here), retried, and transfers leadership away if it
// keeps failing; then applies the token floor if needed; only then sets IsLeader and calls
// OnLeader, so package cluster can rebuild its expiry heap from applied state with every
// lease restarted in full. When raft reports the loss, IsLeader turns false at once (Submit
// rejects from then on) and the loop calls OnFollower.
package raftnode
