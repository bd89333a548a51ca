// Package server is the TCP session loop in front of a cluster.Node, shared by single and
// cluster mode: accept with a connection limit, the mandatory handshake (docs/protocol.md section
// 8), a read loop that decodes pipelined frames out of 4096-byte reads, and a write path that
// coalesces up to 64 replies per write.
//
// One goroutine reads each connection and, after each read, writes the replies it produced
// itself, so an uncontended request costs no goroutine hand-off. Replies decided elsewhere (a
// waiter granted on another connection's release, a wait timer, the sweep) are queued and a
// per-connection writer goroutine flushes them. Writes are serialised by one mutex; a write
// that makes no progress for wire.WriteStallTimeout closes the connection.
//
// Connection limits: at most Config.MaxConns client connections, of which at most
// Config.MaxHandshakes (a quarter by default) may be in the handshake: that share is all that
// connections without the secret can hold, so authenticated clients keep the rest. A newcomer
// over either limit takes the place of the oldest connection in the handshake that has sent
// nothing (a byte waiting unread in its socket counts as sent) or has been in the handshake
// for over a second; that one is answered E unavailable and closed. When none can make room
// the newcomer is refused with E unavailable. Either way the answer comes before the
// handshake, which a client can tell from every other E unavailable: it means the connection
// limit. There is no queue: behind silent connections a client would wait out their
// handshake timeout.
//
// Timeouts: the handshake must finish within wire.HandshakeTimeout of accept; a frame that has
// begun must end within wire.ProgressTimeout of the read that brought its first byte; idle time
// between frames is not limited.
//
// Cluster mode: while Config.Router says the node is not the leader, a session hands each
// checked acquire and release to the Router (cluster/forward) instead of the node; pings stay
// local. An acquire is handed over with the node's replier for it (cluster.Node.Forwarded),
// so that a grant which comes back after the client left is the node's to release. ServePeer runs a follower's forward link as a session that starts ready (the peer
// port authenticated it) and never forwards again.
//
// The package must never decide lock semantics (the node does) or parse bytes by hand (wire
// does), and never holds a lock while calling into the node.
package server
