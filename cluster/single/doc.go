// Package single is a single-mode node: it composes the lock node (package cluster) with its
// local applier, the client-protocol server (cluster/server) and the HTTP side (cluster/admin:
// health, readiness, metrics, status, lock inspection) into one thing that Start starts and
// Stop stops. It is single mode's counterpart of cluster/member.
//
// What it owns:
//   - building the node (cluster.NewNode with no Replicated: the Local applier) and the
//     server on it, and running the node's loop;
//   - the client listener (TLS on it, handshakes inside each session's deadline) and the
//     --http listener (its connection cap, then TLS inside the cap);
//   - readiness: ready until the drain begins;
//   - the order of stop: the server drains (no new clients; waiters and new acquires are
//     answered E unavailable; every connection is still read) and its sessions close, then
//     the node closes, then HTTP shuts down.
//
// What it must never do: parse flags or read files (cmd/latch turns flags, environment,
// secret and TLS files into a Config), handle signals or choose exit codes, decide a lock
// request (package cluster does), or run raft or a peer port (single mode keeps the lock table
// in memory: tokens are monotonic for the life of the process, and Node.TokenFloor carries
// them across restarts; the layering test keeps member, peer and forward out). Its errors name the CLI flags a user sets, since that is where they surface.
package single
