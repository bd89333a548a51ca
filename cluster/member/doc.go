// Package member is a cluster-mode member: it composes the lock node (package cluster),
// the raft node (cluster/raftnode), the peer port (cluster/peer), the follower's forwarding
// link (cluster/forward), the client-protocol server (cluster/server) and the membership
// side of the admin API (cluster/admin) into one thing that Start starts and Stop stops.
//
// What it owns:
//   - the raft adapter: raftnode as the lock node's Proposer and StateReader (raft.go), with
//     raftnode's outcomes handed on as the node's;
//   - leadership fan-out: raft's leadership reaches the node, the router (sessions decide
//     locally or forward) and the forwarding link (raft.go);
//   - readiness (Member.Ready) and the Router;
//   - the admin.Cluster implementation, forwarding changes, backups and restores to the
//     leader over the peer port's admin channel (admin.go);
//   - the bootstrap decision for --initial-cluster (bootstrap.go), the join state machine
//     for --join (join.go), Raft admission, vouching and the vote quarantine (peers.go);
//   - protocol revision 2 across nodes: the forward link dials the revised forward channel
//     and falls back to the latch/1 one on a leader that refuses it, both channels are
//     served (member.go), and the cluster's one-way feature switch is committed by the
//     leader once every server serves the revised channel, after which a server that does
//     not cannot be added (features.go);
//   - serving (serve.go): Serve opens the client listener and the admin HTTP, whose
//     readiness is Ready while the node is not draining;
//   - the order of start and stop: the client sessions drain before raft shuts down, raft
//     before the peer port closes, and HTTP shuts down last.
//
// What it must never do: parse flags or read files (cmd/latch turns flags, environment,
// secret and TLS files into a Config), handle signals or choose exit codes, decide a lock
// request (package cluster does), or let cluster and raftnode import each other (this
// package is where the two meet). Its errors name the CLI flags a user sets, since that is
// where they surface.
package member
