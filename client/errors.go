package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/latchd/latch/wire"
)

// Results of the client's calls. Each is defined once here; calls return them wrapped
// with detail, so test them with errors.Is. The section "Errors" of the package
// documentation says what each means for the lock and what to do.
var (
	// ErrTimeout: definitely not acquired. The server answered T (the lock was still held
	// when the wait ran out), or the request was still in the local queue at the deadline
	// and was never sent. When no server could take it at all, the error is ErrUnavailable
	// too: test that first to tell "latch is down" from "the lock is held".
	// Its text is the same for every call; the wrapping error says what was not done.
	ErrTimeout = errors.New("latch: timed out (definite: not applied)")
	// ErrBusy: definitely not acquired. The server's admission refused the acquire (B).
	ErrBusy = errors.New("latch: not acquired (definite): the server is at its admission limit (busy); back off and retry")
	// ErrIndeterminate: the call may or may not have taken effect. For an acquire the lock
	// may be held under a token the caller never saw; it ends by itself with its lease.
	ErrIndeterminate = errors.New("latch: outcome unknown: the request may or may not have been applied; do not assume you hold the lock, and do not assume it is free before its lease could have ended")
	// ErrNotHeld: the release found nothing to release (N): the lock had already expired,
	// was released before, or the token is not the current holder's.
	// Ticket.Release says when the ticket's own lease had ended before it (ErrLeaseEnded).
	ErrNotHeld = errors.New("latch: not held: this token does not hold the lock (its lease ended, it was released already, or it is not the current token); if your work ran past the lease, another holder may have had the lock meanwhile")
	// ErrAlreadyReleased: Ticket.Release was called again after an earlier call released
	// the lock (or found it not held). Nothing was sent.
	ErrAlreadyReleased = errors.New("latch: this ticket was already released (nothing sent)")
	// ErrUnsupportedDuration: a duration was outside its range after rounding up to whole
	// seconds. Nothing was sent.
	ErrUnsupportedDuration = errors.New("latch: unsupported duration (nothing sent): wait must be 0..255 s, lease 1..3600 s, min work budget 0..250 s, after rounding up to whole seconds")
	// ErrInsufficientLease: the minimum work budget is longer than the lease. Nothing was sent.
	ErrInsufficientLease = errors.New("latch: insufficient lease (nothing sent): the min work budget is longer than the lease; ask for a longer lease or a shorter budget")
	// ErrBadKey: the key breaks the key rules (locally: wrapped with the wire key error, and
	// nothing was sent; or answered E bad_key by a server).
	ErrBadKey = errors.New("latch: bad key")
	// ErrUnavailable: no server could take the request during the whole call: every attempt
	// was answered E unavailable (no leader, shutting down), or no server could be reached
	// (dial refused, handshake failed, not a latch server). Definitely not applied. When it
	// ends a call at its deadline, the error is ErrTimeout too (a definite non-acquire), and
	// its message names the servers tried and what each last did. A waiter that its server
	// drops when it shuts down is answered E unavailable too.
	ErrUnavailable = errors.New("latch: unavailable (definite: not applied): no server could take the request (no leader, or shutting down); retry later")
	// ErrTokenExhausted: the server's token counter is at its maximum; it grants no more.
	ErrTokenExhausted = errors.New("latch: the server's token counter is exhausted; it cannot grant locks any more (restart a single server with a higher --token-floor, or migrate)")
	// ErrAuth: the handshake failed: wrong secret, a server that failed its own proof,
	// a server without auth while this client has a secret (downgrade refused), a server
	// that wants a secret this client lacks, or a protocol version mismatch.
	ErrAuth = errors.New("latch: authentication failed; check that client and server use the same secret file, and that you reach the right server")
	// ErrClosed: the client was closed. Nothing new is sent.
	ErrClosed = errors.New("latch: client closed")
	// ErrOwnerExhausted: the client's owner counter would wrap to 0, so the client fails
	// closed forever: nothing is sent any more. Create a new Client.
	ErrOwnerExhausted = errors.New("latch: owner counter exhausted; this client fails closed and sends nothing more; create a new Client")
	// ErrQueueFull: the local queue of unsent requests is full. Nothing was sent.
	ErrQueueFull = errors.New("latch: local request queue is full (nothing sent); too many requests wait for a connection; back off, or raise the queue size (in Go: Config.QueueSize)")
	// ErrUnsupported: the extend was not applied, definitely, because the server does not
	// offer it: no connection of the pool carries protocol revision 2 (nothing was sent), or a
	// server answered E unsupported (the node, or the leader it forwards to, runs a latch
	// without extend, as in a rolling upgrade). Asking again does not help while that lasts.
	// The ticket's deadline stands; its lease ends then.
	ErrUnsupported = errors.New("latch: unsupported (definite: not extended): the server does not offer extend (protocol revision 2); the ticket's deadline stands")
	// ErrExtendInProgress: Ticket.Extend or KeepAlive was called while an extend of the same
	// ticket is in progress, or a keep-alive runs: a ticket has one extend in flight at a time,
	// and a keep-alive owns its extensions. Nothing was sent.
	ErrExtendInProgress = errors.New("latch: an extend of this ticket is in progress, or its keep-alive runs (nothing sent); one extend at a time")
	// ErrCanceled: the caller's context was canceled while the request was still unsent.
	// Nothing was sent, so nothing was acquired or released. It also wraps ctx.Err().
	ErrCanceled = errors.New("latch: canceled before the request was sent (nothing sent)")
)

// ServerError is an E answer from a server. Its Is method maps the reason to the sentinel
// errors above, so errors.Is(err, ErrUnavailable) holds for E unavailable; reasons without a
// sentinel (bad_owner, bad_range, internal, unknown ones) match only by errors.As.
type ServerError struct {
	Reason wire.Reason
}

// reasonErrors is the one table from E reasons to the client's sentinel errors.
var reasonErrors = map[wire.Reason]error{
	wire.ReasonUnavailable:    ErrUnavailable,
	wire.ReasonIndeterminate:  ErrIndeterminate,
	wire.ReasonTokenExhausted: ErrTokenExhausted,
	wire.ReasonBadKey:         ErrBadKey,
	wire.ReasonAuthFailed:     ErrAuth,
	wire.ReasonAuthRequired:   ErrAuth,
	wire.ReasonBadVersion:     ErrAuth,
	wire.ReasonUnsupported:    ErrUnsupported,
}

// Error describes the reason and, through the matching sentinel, what to do.
func (e *ServerError) Error() string {
	if s, ok := reasonErrors[e.Reason]; ok {
		return fmt.Sprintf("server answered E %s: %v", e.Reason, s)
	}
	switch e.Reason {
	case wire.ReasonBadOwner, wire.ReasonBadRange, wire.ReasonBadRequest:
		return fmt.Sprintf("latch: server answered E %s to a request the client checked; this is a bug in the client or the server, please report it", e.Reason)
	case wire.ReasonInternal:
		return "latch: server answered E internal: a server bug; the request was not applied"
	}
	return fmt.Sprintf("latch: server answered E %s", e.Reason)
}

// Is reports whether target is the sentinel error for e's reason.
func (e *ServerError) Is(target error) bool {
	s, ok := reasonErrors[e.Reason]
	return ok && s == target
}

// unreachableError is the result of a call that no server took during its whole time: every
// attempt was refused with E unavailable, or no connection could be made (dial refused,
// handshake failed, not a latch server). It is a definite no (nothing was applied), so it is
// ErrTimeout as before, and ErrUnavailable, which says why; a call bounded by its context's
// deadline is context.DeadlineExceeded too.
type unreachableError struct {
	kind     kind
	refused  bool   // some server answered E unavailable
	ctxBound bool   // the context's deadline ended it
	tried    string // each server and what it last did, from Client.tried
}

func (e *unreachableError) Error() string {
	what := "nothing was applied"
	switch e.kind {
	case kindAcquire:
		what = "not acquired"
	case kindRelease:
		what = "not released; the lock, if still held, ends with its lease"
	case kindExtend:
		what = "not extended; the ticket's deadline stands"
	}
	how := "guaranteed unsent"
	if e.refused {
		how = "every attempt was refused with E unavailable or not sent"
	}
	when := "its deadline"
	if e.ctxBound {
		when = "the context's deadline"
	}
	return fmt.Sprintf("latch: unavailable: no server answered the %s before %s; %s (definite: %s); tried %s", e.kind, when, what, how, e.tried)
}

func (e *unreachableError) Unwrap() []error {
	if e.ctxBound {
		return []error{ErrUnavailable, ErrTimeout, context.DeadlineExceeded}
	}
	return []error{ErrUnavailable, ErrTimeout}
}

// errNotLatch is a handshake answered with bytes that are not latch/1.
var errNotLatch = errors.New("not a latch server: it answered the latch hello with something else; check the address and port (--servers)")

// Errors internal to the transport; they end in one of the sentinels before reaching a caller.
var (
	errNoConnection = errors.New("no connection to any server yet")
	errPingTimeout  = errors.New("health ping: no pong in time")
	errRetired      = errors.New("connection retired after E unavailable")
	errProtocol     = errors.New("server broke the protocol")
)
