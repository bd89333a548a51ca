package server

import (
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/wire"
)

// handle serves one decoded frame. A non-empty result is the reason the connection must
// close with (section 5: bad_request, auth_required, auth_failed, bad_version).
func (ss *session) handle(r *wire.Request, readAt time.Time) wire.Reason {
	switch ss.state {
	case awaitHello:
		return ss.hello(r)
	case awaitProof:
		return ss.proof(r)
	}
	switch r.Op {
	case wire.OpAcquire, wire.OpRelease, wire.OpPing, wire.OpExtend: // L: only decoded with FlagLeases
	default: // H or V after the handshake
		return wire.ReasonBadRequest
	}
	if reason := r.Check(); reason != "" {
		if ss.origins && reason == wire.ReasonBadOwner && r.Op == wire.OpRelease {
			ss.origin(r) // a follower naming a client session: no request, no answer
			return ""
		}
		ss.srv.m.FrameError(reason)
		ss.Reply(wire.Response{Op: wire.OpError, Owner: r.Owner, Reason: reason})
		return ""
	}
	if rt := ss.srv.cfg.Router; rt != nil && r.Op != wire.OpPing && !rt.Local() {
		ss.route(rt, r, readAt)
		return ""
	}
	switch r.Op {
	case wire.OpAcquire:
		ss.srv.node.Acquire(ss.conn, r.Owner, r.Key, r.Wait, r.Lease, readAt)
	case wire.OpRelease:
		ss.srv.node.Release(ss.conn, r.Owner, r.Key, r.Token)
	case wire.OpExtend:
		ss.srv.node.Extend(ss.conn, r.Owner, r.Key, r.Token, r.Lease)
	case wire.OpPing:
		ss.Reply(wire.Response{Op: wire.OpPing, Owner: ss.pong(r.Owner)})
	}
	return ""
}

// pong is the owner a ping with owner is answered with: its own, but on a forward link
// whose follower asks for its clients' addresses (cluster.OriginsAsk) while this node audits,
// cluster.OriginsYes, after which the link's origin frames are read (cluster/origins.go).
func (ss *session) pong(owner uint64) uint64 {
	if owner == cluster.OriginsAsk && ss.peer && ss.srv.node.Audits() {
		ss.origins = true
		return cluster.OriginsYes
	}
	return owner
}

// origin acts on an origin frame of a forward link: R with owner 0 binds origin r.Token to
// the address in its key, or forgets it when the key is empty.
func (ss *session) origin(r *wire.Request) {
	id := uint32(r.Token)
	switch {
	case uint64(id) != r.Token:
		return // not an origin id (a follower of this build never sends one): ignored
	case len(r.Key) == 0:
		ss.srv.node.ForgetOrigin(ss.conn, id)
	case len(r.Key) <= cluster.MaxOriginLen:
		ss.srv.node.BindOrigin(ss.conn, id, string(r.Key))
	}
}

// route hands a checked acquire or release to the router while this node is not the leader.
// A peer session (a request that was forwarded once already) is never forwarded again: the
// node it reached is no longer the leader, so it answers E unavailable (never applied; the
// follower's client may retry) instead of starting a chain or a loop of hops. Nor is an
// acquire while the server drains: Shutdown follows, and would close the session before the
// leader's answer came back (an indeterminate acquire, and maybe a grant nobody holds), so
// it is answered E unavailable as a draining leader answers it.
func (ss *session) route(rt Router, r *wire.Request, readAt time.Time) {
	if ss.peer || (r.Op == wire.OpAcquire && ss.srv.closing.Load()) {
		ss.srv.m.FrameError(wire.ReasonUnavailable)
		ss.Reply(wire.Response{Op: wire.OpError, Owner: r.Owner, Reason: wire.ReasonUnavailable})
		return
	}
	if r.Op == wire.OpAcquire {
		// A grant that comes back after this session is gone is the node's to release.
		rt.Forward(r, readAt, ss.srv.node.Forwarded(ss.conn, r.Key, rt))
		return
	}
	rt.Forward(r, readAt, ss)
}

// handshakeFrame is what a request gets while the handshake waits for a want frame: ""
// for want itself; E auth_required for a command (whose owner the answer names); E
// bad_request for any other handshake frame.
func (ss *session) handshakeFrame(r *wire.Request, want wire.Op) wire.Reason {
	switch r.Op {
	case want:
		return ""
	case wire.OpAcquire, wire.OpRelease, wire.OpPing, wire.OpExtend:
		ss.lastOwner = r.Owner
		return wire.ReasonAuthRequired
	}
	return wire.ReasonBadRequest
}

// hello answers the client's H. With secrets configured the answer asks for a proof.
func (ss *session) hello(r *wire.Request) wire.Reason {
	if why := ss.handshakeFrame(r, wire.OpHello); why != "" {
		return why // a command, or a V before any hello
	}
	if r.Hello.Version != wire.Version {
		return wire.ReasonBadVersion
	}
	sn, err := wire.NewNonce()
	if err != nil {
		ss.srv.log.Error("no random nonce for a handshake", "error", err)
		return wire.ReasonInternal
	}
	ss.nonce, ss.sn = r.Hello.Nonce, sn
	// The client's offers that this node serves now are in force from the next frame on
	// (docs/protocol.md section 8); every other client bit is ignored, as latch/1 says.
	echo := wire.EchoFlags(r.Hello.Flags, ss.srv.node.Revisions())
	ss.setRevisions(echo)
	h := wire.Response{Op: wire.OpHello, Hello: wire.Hello{Version: wire.Version, Flags: echo, Nonce: sn}}
	if len(ss.srv.cfg.Secrets) > 0 {
		h.Hello.Flags |= wire.FlagAuthRequired
		ss.state = awaitProof
	} else {
		if !ss.srv.hs.done(ss) {
			return wire.ReasonUnavailable // evicted just now: run answers E unavailable
		}
		ss.state = ready
	}
	ss.Reply(h)
	return ""
}

// proof checks the client's V against every accepted secret and answers with the same one.
func (ss *session) proof(r *wire.Request) wire.Reason {
	if why := ss.handshakeFrame(r, wire.OpProof); why != "" {
		return why // a command, or a second hello
	}
	secret, ok := wire.MatchClientProof(ss.srv.cfg.Secrets, ss.nonce, ss.sn, r.Proof)
	if !ok {
		return wire.ReasonAuthFailed
	}
	if !ss.srv.hs.done(ss) {
		return wire.ReasonUnavailable // evicted just now: run answers E unavailable
	}
	ss.state = ready
	ss.Reply(wire.Response{Op: wire.OpProof, Proof: wire.ServerProof(secret, ss.nonce, ss.sn)})
	return ""
}
