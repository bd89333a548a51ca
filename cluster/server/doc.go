// Package server is the TCP session loop in front of a cluster.Node, shared by single and
// cluster mode: accept with a connection limit, the mandatory handshake (PROTOCOL.md section
// 8), a read loop that decodes pipelined frames out of 4096-byte reads, and a write path that
// coalesces up to 64 replies per write.
//
// One goroutine reads each connection and, after each read, writes the replies it produced
// itself, so an uncontended request costs no goroutine hand-off. Replies decided elsewhere (a
// waiter granted on another connection's release, a wait timer, the sweep) are queued and a
// per-connection writer goroutine flushes them. Writes are serialised by one mutex; a write
// that makes no progress for wire.WriteStallTimeout closes the connection.
//
// Timeouts: the handshake must finish within wire.HandshakeTimeout of accept; a frame that has
// begun must end within wire.ProgressTimeout of the read that brought its first byte; idle time
// between frames is not limited.
//
// Cluster mode: while Config.Router says the node is not the leader, a session hands each
// checked acquire and release to the Router (cluster/forward) instead of the node; pings stay
// local. ServePeer runs a follower's forward link as a session that starts ready (the peer
// port authenticated it) and never forwards again.
//
// The package must never decide lock semantics (the node does) or parse bytes by hand (wire
// does), and never holds a lock while calling into the node.
package server
