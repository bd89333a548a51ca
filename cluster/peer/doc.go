// Package peer owns a node's peer port (--raft-addr): one TCP listener that every other node
// of the cluster dials, split into channels by the first byte the dialer writes, and the
// authentication that every connection passes before that byte is honoured.
//
// Channels (the values live in channel.go and nowhere else):
//
//	ChannelRaft          'r'  hashicorp/raft NetworkTransport RPCs, through StreamLayer
//	ChannelForward       'f'  requests a follower forwards to the leader, latch/1 frames
//	ChannelAdmin         'a'  admin calls between nodes
//	ChannelForwardLeases 'F'  the same, in the frames of protocol revision 2 (wire.FlagLeases)
//
// # A channel for a protocol revision
//
// The forward channel carries client frames with no hello of their own, and the peer
// hello's flags cannot carry an offer: the listener speaks first, and a dialer of an older
// latch refuses a hello with a bit it does not know (ErrNotPeerPort). So a revision of a
// channel's protocol is a channel byte of its own, and the dialer asks for it: a listener
// that does not know the byte rejects it with the ordinary verdict, and the dialer then
// dials the older channel (DialFallback). A listener of every latch version so far reads
// an unknown channel byte like a known one (with the identity of version 2 and the proof
// after it, checked as usual), then answers 'n' and closes; nothing else tells a dialer
// that a channel is unknown. The fallback is taken on that 'n' only: a network error, a
// listener that closes without a verdict or a wrong server proof fails the dial, so a
// fault never quietly downgrades a link to a listener that knows the newer channel. With
// identities stated, the 'n' of the first attempt also makes Dial try version 1 of the
// handshake (below), so an older listener sees three dials: 'F' with an identity, 'F'
// without, then 'f'. A follower dials once per connection to its leader, so this costs a
// few round trips in a mixed cluster and nothing in one of a single version.
//
// # Authentication (docs/protocol.md section 9)
//
// With TLS configured, the connection is first wrapped in mutual TLS 1.3 (both sides present
// a certificate signed by the cluster CA, --tls-ca). With secrets configured
// (--peer-secret-file), the dialer and the listener then prove to each other that they hold a
// peer secret. The peer credential belongs to the nodes alone: clients prove another secret
// (--secret-file) on another port, and operators another one (--admin-secret-file) over HTTP;
// neither opens this port (docs/SECURITY.md). With both, both
// happen, TLS first. With neither, the exchange below carries no proof, just the channel byte:
// that is the insecure single-host setup, and whether to allow it is the caller's decision
// (Config.Authenticated says which it is), not this package's.
//
// The handshake below runs inside TLS when TLS is on. The listener speaks first:
//
//	L -> D  hello    'P' | version=1 | flags | server_nonce[32]              35 bytes
//	                 flags bit 0: a secret is required; the other bits are 0
//	D -> L  version 1 (states nothing):
//	          ch                                                              1 byte
//	        version 2 (states the dialer's Identity):
//	          'I' | ch | len(id) | id | len(addr) | addr          4 + id + addr bytes
//	        if bit 0: client_nonce[32] | client_proof[32]                    64 bytes
//	L -> D  verdict  'y'  accepted; if bit 0 followed by server_proof[32]
//	                 'n'  rejected, and the listener closes: nothing says why
//
//	version 1: client_proof = HMAC-SHA256(secret, "latch/1 peer client" | ch | client_nonce | server_nonce)
//	           server_proof = HMAC-SHA256(secret, "latch/1 peer server" | ch | client_nonce | server_nonce)
//	version 2: client_proof = HMAC-SHA256(secret, "latch/2 peer client" | ch | ident | client_nonce | server_nonce)
//	           server_proof = HMAC-SHA256(secret, "latch/2 peer server" | ch | ident | client_nonce | server_nonce)
//	           ident = len(id) | id | len(addr) | addr, as sent
//
// In version 2 the dialer states its node ID (--id) and the address it advertises
// (--advertise, the address the Raft configuration holds for it), 1 to 255 printable bytes
// each, inside the proof; the listener hands them with the connection to the channel
// (IdentityOf). A dialer states them when its Config has ID and Advertise; a tool that is no
// node states nothing (version 1).
//
// Rolling upgrades: the hello is the same in both versions, so a node of an older latch
// (which speaks version 1 only) still reads it. A version 2 message starts with 'I', which is
// no channel byte, so such a node rejects it; a dialer whose version 2 exchange fails after
// a good hello (rejected, or closed) dials once more as version 1. A listener of this version
// takes both. So old and new nodes connect either way; what a listener does with a connection
// that stated no identity is its channel's decision (see StreamLayer and Admission: the Raft
// channel refuses them unless --accept-legacy-peers is set). The fallback lets an attacker on
// the path (who can forge the 'n') strip a stated identity; that only makes the connection
// one that states none, which a listener that requires identities refuses anyway.
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
// secrets rotate: give every node [old, new], then [new, old], then [new]. It is also how a
// cluster moves from one shared secret to a peer secret of its own: the old shared secret is
// the old, the peer secret the new (deploy/README.md).
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
// # What binds what
//
//   - The secret proof binds the channel and (version 2) the stated identity to this
//     connection: only a holder of the peer credential can state anything, and a relay
//     cannot change what was stated.
//   - With mutual TLS the dialer's certificate must be valid for the host of the address it
//     states (x509 host name check), or the listener rejects it. Each node's certificate
//     must name that host anyway, since the other nodes dial it there and verify it. With one
//     certificate per node and one node per host, a node therefore cannot state another
//     node's address, and since the Raft admission compares the address with the one the
//     configuration holds for the ID, nor another node's ID. A shared or wildcard
//     certificate, or several nodes on one host, binds nothing beyond the cluster CA.
//   - With secrets only, the identity is a claim: whoever holds the peer credential can state
//     any member's ID and address. It stops strangers and tools, and a removed node (which
//     states its own ID); it does not stop a credential holder who lies. Only per-node
//     certificates make it more than a claim.
//
// The StreamLayer applies an Admission to every Raft connection before raft sees it: latch
// admits the voters and nonvoters of the node's configuration at their configured address
// (or anyone while the node has no configuration yet: it waits to be added), and connections
// that stated no identity only with --accept-legacy-peers. Refused connections are closed
// and logged once a minute per source. Package raftnode checks the sender named inside each
// RPC against the configuration as well, since one connection may carry any RPC.
//
// # What it must never do
//
// It never decides anything about locks or Raft state, never parses the bytes of a channel's
// protocol, and never reads or writes a connection after handing it to its channel. Who may
// connect is decided by who holds the peer secret or a certificate from the cluster CA;
// which identity may speak Raft is decided by the StreamLayer's Admission, given by its owner.
package peer
