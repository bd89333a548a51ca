// Package peer owns a node's peer port (--raft-addr): one TCP listener that every other node
// of the cluster dials, split into channels by the first byte the dialer writes, and the
// authentication that every connection passes before that byte is honoured.
//
// Channels (the values live in channel.go and nowhere else):
//
//	ChannelRaft    'r'  hashicorp/raft NetworkTransport RPCs, through StreamLayer
//	ChannelForward 'f'  requests a follower forwards to the leader
//	ChannelAdmin   'a'  admin calls between nodes
//
// # Authentication (PROTOCOL.md section 9)
//
// With TLS configured, the connection is first wrapped in mutual TLS 1.3 (both sides present
// a certificate signed by the cluster CA). With secrets configured (--secret-file), the dialer
// and the listener then prove to each other that they hold a shared secret. With both, both
// happen, TLS first. With neither, the exchange below carries no proof, just the channel byte:
// that is the insecure single-host setup, and whether to allow it is the caller's decision
// (Config.Authenticated says which it is), not this package's.
//
// The handshake below runs inside TLS when TLS is on. The listener speaks first:
//
//	L -> D  hello    'P' | version=1 | flags | server_nonce[32]              35 bytes
//	                 flags bit 0: a secret is required; the other bits are 0
//	D -> L  channel  ch                                                       1 byte
//	        if bit 0: client_nonce[32] | client_proof[32]                    64 bytes
//	L -> D  verdict  'y'  accepted; if bit 0 followed by server_proof[32]
//	                 'n'  rejected, and the listener closes: nothing says why
//
//	client_proof = HMAC-SHA256(secret, "latch/1 peer client" | ch | client_nonce | server_nonce)
//	server_proof = HMAC-SHA256(secret, "latch/1 peer server" | ch | client_nonce | server_nonce)
//
// The channel byte is the first byte the dialer writes. The listener speaks first so that a
// dialer learns before it writes anything whether a secret is asked for: a dialer missing one
// fails at once with a clear error, a dialer holding one can refuse a listener that does not
// ask (downgrade), and the proof travels with the channel byte (one round trip after connect
// and TLS, plus the verdict).
//
// Both nonces are fresh from crypto/rand for every connection, so a proof cannot be replayed
// on another connection; the channel byte is inside the MAC, so a relay cannot turn a proof
// made for one channel into access to another; the labels differ per direction and from the
// client protocol's (wire), so no proof of one kind stands in for another. The listener
// accepts a proof made with any of its secrets and answers with the same one; the dialer
// proves with its first secret and accepts only a server proof made with it. That is how
// secrets rotate: give every node [old, new], then [new, old], then [new].
//
// Secrets authenticate the handshake only: nothing after it is encrypted or MACed, so an
// attacker on the path (not merely one who can connect) could read or inject Raft traffic.
// On networks that are not trusted, use TLS (with or without secrets).
//
// A dialer with secrets refuses a hello without bit 0 (no downgrade) and a wrong server proof
// (a fake listener learns nothing it could use and is never talked to). A dialer without
// secrets refuses a hello with bit 0, and says so, instead of failing later on garbage.
// After 'y' (and a good server proof) the connection carries the channel's own protocol,
// with no deadline left on it.
//
// # Bounds
//
// Every accepted connection must send its first byte (its channel byte, or its TLS
// ClientHello) within Config.FirstByteTimeout of accept (default 1 s), and finish the
// handshake, TLS included, within Config.HandshakeTimeout (default 3 s), or it is closed. A
// member needs milliseconds for either: it answers the hello at once. The accept loop only
// accepts: each connection is authenticated in its own goroutine and, once accepted, queued
// for its channel's Listener.
//
// At most Config.MaxHandshakes connections (default 1024) are in the handshake at once, and
// at most Config.MaxHandshakesPerSource (default 256) from one source (an IPv4 address or an
// IPv6 /64). A newcomer over either cap is not turned away while a connection can make room:
// the oldest connection that has sent nothing yet, or has been in the handshake longer than
// FirstByteTimeout, is closed instead, taken from the newcomer's own source when that source
// is at its cap, else from the source holding the most. Only when every connection in the way
// has spoken recently is the newcomer closed at once. So a flood of silent connections costs
// a bounded number of sockets and goroutines and never stalls the loop; it cannot take the
// slots of another source; and even from the members' own address (one host, loopback) it
// cannot lock a member out, because the member's fresh connection speaks within
// milliseconds while the flood's connections are the oldest silent ones. There is no queue
// in front of the handshake: behind silent connections a member would wait for their
// deadlines.
//
// # What it must never do
//
// It never decides anything about locks or Raft state, never parses the bytes of a channel's
// protocol, and never reads or writes a connection after handing it to its channel. Who may
// join the cluster is decided by who holds the secret or a certificate from the cluster CA;
// this package checks the proof, not the identity behind it.
package peer
