// Package forward is the follower half of request forwarding in cluster mode (docs/protocol.md
// section 7, "Cluster mode"; docs/architecture.md, "Cluster mode, through a follower"): a Link carries the acquires,
// releases and extends that clients send to a follower over one pipelined connection to the
// leader's forward channel, and relays each answer to the session that asked.
//
// The forward channel speaks latch/1 frames (docs/protocol.md section 3) with no hello or proof:
// the peer port (cluster/peer) has authenticated the connection before handing it over. The
// leader serves it as an ordinary session that starts ready (server.Server.ServePeer), so
// decoding, admission, FIFO waiters and timeouts are the leader's own code path. Waiters
// live on the leader only.
//
// Protocol revision 2 (docs/protocol.md sections 3.5 and 13; wire.FlagLeases) has a forward channel of
// its own (peer.ChannelForwardLeases), since there is no hello to negotiate it in: the
// follower dials it first and takes the latch/1 channel when the leader's peer port refuses
// it, and Config.Dial says which one a connection is. The leader serves the revised one with
// server.Server.ServePeer(nc, wire.FlagLeases, via): its grants are G with the leader's age,
// and it takes extends. Which revision the link speaks is a property of each connection,
// fixed when it is dialled: a leader replaced by an upgraded one is dialled afresh. One link
// carries the requests of every session of the follower, latch/1 and revised alike, so it
// translates per request:
//   - a grant is relayed as the node's own are, Response{Op: OpAcquire, Token, Age}, with
//     the leader's age on a revised connection and 0 on a latch/1 one; the follower adds no
//     age of its own, and the session writes G or A for its client;
//   - an extend (only a revised session sends one) is written only to a revised connection,
//     and its answer (L, N, E) relayed; on a latch/1 connection it is answered
//     E unsupported by the link, definitely not applied and never written, since a latch/1
//     leader would read it as an unknown op and close the link on every request in flight;
//   - a frame of the other revision from the leader (a G on a latch/1 connection, an A on a
//     revised one) is a stream that cannot be trusted: the connection fails.
//
// What the package owns:
//   - one connection at a time to the current leader (SetLeader), dialled through the
//     caller's Config.Dial, with one writer that coalesces frames and one reader per
//     connection;
//   - link-local owners: every request written gets a fresh non-zero owner, so clients of
//     the follower that use the same owner values never see each other's answers; each
//     answer is relayed with the client's own owner;
//   - re-stamping an acquire's wait, just before it is written, with the time left since
//     the follower read the frame, rounded up to whole seconds: never shorter than the
//     client asked, never restarted by a queue or a dial; 0 stays 0;
//   - honest outcomes. A request that was definitely not written (no leader known, dial
//     failed, queue full, link closed, time used up while queued) is answered E unavailable.
//     One that may have been written, whose connection then failed or whose answer is
//     overdue, is answered E indeterminate. Every answer the leader sends (A, T, B, R, N,
//     E reason, and on a revised connection G and L) is relayed unchanged but for the owner
//     and the shape of a grant (above). A stream that can no longer be trusted (an E with
//     owner 0, an answer no request in flight can get, a malformed frame) fails the
//     connection.
//
// A request queued past the end of its wait is answered E unavailable, not T: T says the key
// was held by another when the wait ran out, and the follower never asked the leader, so it
// cannot know that. E unavailable (definitely not applied) is what it does know; the official
// client, past its deadline, turns it into the same Timeout it would have returned for T.
//
// What it must never do: decide lock semantics (only the leader answers A, G, T, B, R, N or L),
// send anything twice or again after it may have been written (a lost connection makes its
// requests indeterminate, never retried), block a session on the network, or keep a
// reference to a request's decoder buffer after Forward returns.
//
// The follower's client connection closing leaves its requests on the leader (there is no
// way to cancel one in latch/1); their answers go to the Replier the session gave Forward,
// like any other, and the link forgets them when they arrive or their connection fails.
// What becomes of a grant nobody will use is not the link's decision: the session's replier
// for a forwarded acquire (cluster.Node.Forwarded) releases it.
package forward
