// Package client is the official Go client of latch, a lock service with fencing tokens.
// It speaks latch/1 over a small pool of connections and applies the client rules of
// docs/protocol.md section 10, which make its results trustworthy: a Ticket is handed out
// only when the caller can still use it, and every other result says honestly whether the
// lock may be held. docs/protocol.md describes the wire protocol and these rules for
// clients in other languages, with test vectors in docs/vectors.
//
// It also offers protocol revision 2 (docs/protocol.md): grants that carry their
// age, Ticket.Extend and Ticket.KeepAlive. They work against servers that offer the
// revision (a single-mode server, and a cluster once every member serves it); against every
// other server the client is latch/1 (see "Revision 2" below).
//
// It imports only package wire and the standard library.
//
// # Use
//
//	c, err := client.New(client.Config{Servers: []string{"10.0.0.1:7400"}, SecretFile: "/etc/latch/secret"})
//	...
//	defer c.Close()
//	t, err := c.Acquire(ctx, "jobs/nightly", 40*time.Second, client.AcquireOptions{Wait: 10 * time.Second, Lease: time.Minute})
//	if err != nil { ... }           // see Errors below
//	defer t.Release(context.Background())
//	work(t.Context(), t.Token)       // pass the token to every resource you write
//
// With a server that offers revision 2, a holder whose work has no known end keeps the lock
// with t.KeepAlive(ctx, 0) and watches t.Context(): it ends, with context.Cause saying why,
// when the lock is lost or can no longer be kept.
//
// New returns at once; connections are dialed in the background (and redialed when they
// die). A call made before any connection is up waits in the local queue, within its own
// deadline.
//
// # What the client guarantees
//
// Inputs are checked before anything is sent. Durations are rounded up to whole seconds and
// then range-checked; nothing is clamped. Wait is 0..255 s, Lease 1..3600 s (0 means 30 s),
// and the min work budget 0..250 s and at most the lease; otherwise ErrUnsupportedDuration or
// ErrInsufficientLease. Negative durations are out of range. Keys follow docs/protocol.md
// section 4, and a key containing CR is refused too (ErrBadKey, wrapping the wire key error).
//
// One deadline. Wait bounds the whole acquire: the local queue, reconnects, failovers while
// the request is still unsent, the write, and the answer. The deadline is taken once, at the
// call, on the monotonic clock; a context deadline that is sooner shortens it. Just before
// the frame is written, its wait is stamped with the time left, rounded up to whole seconds,
// so a late connection or a failover never restarts the server's wait. Wait 0 is sent as 0
// (one immediate attempt, no server queue); its whole attempt is bounded by IOTimeout (5 s).
//
//   - Still in the local queue at the deadline: ErrTimeout; nothing was sent.
//   - Unsent failures (dial or handshake failed, the connection broke before any byte of the
//     frame was written, or a server answered E unavailable) are sent again, with the same
//     owner, within the deadline: the client rides through a leader election. Servers that
//     answered E unavailable are asked again too, after a backoff (50 ms doubling to 1 s,
//     jittered); others at once. Once a byte may have been sent, an acquire is never sent
//     again.
//   - No server took it during the whole call (every attempt refused with E unavailable, or
//     no connection could be made): ErrTimeout and ErrUnavailable both, and the message
//     names every server and what it last did (connection refused, not a latch server, E
//     unavailable, ...).
//   - Sent and not answered in time: exactly that connection is closed (the server then
//     drops the request if it is still waiting) and the result is ErrIndeterminate.
//
// "In time" for an acquire with wait > 0 is written_at + stamped wait + ReplyGrace (1 s).
// The server answers T when its own wait ends, counted from when it read the frame; since
// the stamp is rounded up, that is at or just after the client's deadline. Without a grace
// every contended acquire that times out would be Indeterminate and cost a connection. With
// it, a T or B arriving in the grace is a definite no (correlated T and B stay definite), and
// an A arriving in the grace fails the delivery gate (below). So Acquire returns at most
// about 2 s after its wait (less than 1 s of rounding plus ReplyGrace). For wait 0 there is
// no grace: the 5 s is the whole bound. A context canceled (not a deadline) ends the call at
// once: unsent, ErrCanceled; possibly sent, ErrIndeterminate and that connection is closed.
// (One exception: while the caller's own goroutine is writing to a socket whose send buffer
// is full, the cancellation waits for that write, which ends by the answer deadline above.)
//
// Delivery gate. A grant becomes a Ticket only if the operation deadline has not passed
// and the lease left, reckoned conservatively from the moment the frame was written
// (deadline - now), is at least the min work budget. Otherwise the client releases that exact
// token in the background (a compensating release), keeps the connection open and returns
// ErrIndeterminate. The deadline of an A (latch/1) is written_at + lease. That of a G
// (revision 2) counts the age and the clock margin, below. Ticket.Deadline is that deadline;
// Ticket.Context ends then (context.DeadlineExceeded) or when the ticket ends otherwise.
//
// Release. An explicit release has IOTimeout from the call, and a compensating release
// IOTimeout from when it was queued, reconnects and resends included: a release whose
// connection was lost, or that was answered E indeterminate, is sent again, and one answered
// E unavailable is retried with the backoff above. R is success, N
// is ErrNotHeld; no answer is never success (ErrIndeterminate). At most
// Config.CompensationQueue compensating releases run at once; beyond that the token is left
// to end with its lease, and Stats.CompensationsDropped counts it. The call whose error
// started a compensating release carries it: CompensationOf(err).Wait(ctx) returns when that
// release has ended, nil once it was confirmed (R or N), without polling Stats.
//
// Owners. Every request carries an owner from one counter per Client: distinct and never 0.
// If the counter would wrap to 0, the client fails closed for good: every later call returns
// ErrOwnerExhausted and nothing is sent. Create a new Client.
//
// Handshake. Each connection starts with a hello carrying a fresh random nonce and the offer
// of revision 2 (unless Config.Latch1Only). With a secret, a server whose hello does not ask
// for auth is refused (no downgrade), and the server's proof is checked in constant time: a
// server that cannot prove the secret could hand out fake tokens. When the last attempt at
// every server failed authentication and no connection is up, queued and new calls fail at
// once with ErrAuth instead of waiting.
//
// Answers are matched to requests by owner, in any order; an answer for no pending owner is
// ignored and logged. E with owner 0 means the server is closing the connection: requests
// pending on it are treated as sent (acquires ErrIndeterminate; releases are resent).
//
// # Revision 2
//
// Negotiation. The hello sets wire.FlagLeases, an offer, and nothing else. A server that
// implements the revision echoes it, and only then do its frames appear on that connection
// (the response decoder switches right after the server's hello). A server that does not
// echo gets latch/1, byte for byte after the hello, which every latch/1 server ignores the
// flags of. A server whose hello echoes an offer the client did not make breaks the
// handshake: that connection is dropped like a failed handshake (wire.AcceptFlags). Other
// server bits are ignored. Stats.ConnsRevised counts the connections with the revision. A
// latch/1 connection is retired after about a minute (its calls are answered first) and its
// slot dials again, so a cluster that switched the revision on since, once every member
// served it, is met with it.
//
// Grant age. On a revised connection a grant is G, with the time (ms, rounded down) the
// request spent on the server before its lease started. The ticket's deadline is
//
//	written_at + (min(age, read_at - written_at) + lease) x (1 - rho), rounded down
//
// where read_at is when the G was read and rho is Config.Rho (default 0.001): a span of the
// server's time is at least (1 - rho) as long on the client's clock. The age never counts
// more than the client saw pass, so a wrong age cannot make a deadline later than a lease
// started at the read. A waiter granted after a long wait keeps almost all of its lease
// (lease x (1 - rho) minus the commit of its grant), where latch/1 counted the wait against
// it. Tickets granted on a latch/1 connection keep latch/1's deadline, with no margin.
//
// Extend. Ticket.Extend(ctx, lease) sends L (key, token, new lease, checked as an acquire's)
// on any revised connection, one at a time per ticket, never at or after the deadline (nor
// resent after it), within IOTimeout. A definite L replaces the deadline with that attempt's
// written_at + lease x (1 - rho), even when that is earlier. N means the token does not hold
// the lock: the ticket is lost, its context ends with ErrTicketLost. While an answer is
// unknown (in flight, E indeterminate, a connection lost after the write) the deadline is
// min(old, written_at + lease x (1 - rho)) of the first attempt that may have been applied,
// and a resend is safe (each attempt is applied again). E unavailable is asked again with the
// backoff of a release. E unsupported, and an extend with no revised connection to go out
// on, are ErrUnsupported: definite, never retried, nothing sent in the second case. An L read
// after the deadline does not revive the ticket: its token is released in the background.
// CurrentDeadline is the deadline now; Ticket.Deadline stays the grant's.
//
// Keep-alive. Ticket.KeepAlive(ctx, every) extends with the ticket's lease every `every`
// (default a third of the lease) after the start of the current lease, retrying with
// backoff; when only `every` of the lease is left unconfirmed, or an extension fails
// definitely, the ticket's context ends at that moment. Release stops it first. The context's
// cause says how the ticket ended, as etcd's Session.Done does:
//
//   - ErrTicketEnded: released (context.Canceled), or the deadline passed
//     (context.DeadlineExceeded);
//   - ErrTicketLost: an extend was answered N (its lease had ended, it was released or
//     force-released, or another token holds the key);
//   - ErrTicketUnconfirmed: the keep-alive had no extension confirmed before the deadline
//     neared, or one failed definitely (E unsupported, another E, the client closed).
//
// Fencing still decides. A keep-alive stops a holder only while the holder runs: one paused
// past its deadline (GC, SIGSTOP, a suspended VM) pauses its keep-alive too, its lease ends,
// and a newer token may be granted. When it wakes, only the resources' check of its token
// refuses its writes. Pass Ticket.Token to every resource, with a keep-alive as without.
//
// # Pool and failover
//
// Config.Conns connections (default 2) are kept open; connection i starts at server
// i mod len(Servers). A failed dial or handshake moves to the next server at once, and after
// a whole round of failures backs off (50 ms doubling to 2 s, plus up to half as much again
// at random), as it does after a connection that lived less than a second. A connection
// that dies is replaced in the background by dialing the next server. A connection whose
// server answered E unavailable takes no new requests and is closed once its pending ones
// are answered, so its slot moves on to another server; the request that got E unavailable
// waits in the queue, to be taken at once by a connection to a server that has not refused
// it, or after its retry backoff by any connection. A connection on
// which nothing was read for PingInterval is pinged, and closed if the pong does not come
// within IOTimeout.
//
// # Errors
//
// Test results with errors.Is. What each means for the lock, and what to do:
//
//   - nil from Acquire: you hold the lock until Ticket.Deadline (CurrentDeadline once
//     extended). Use Ticket.Context for the work and pass Ticket.Token to every resource.
//   - ErrTimeout: definitely not acquired (T, or never sent before the deadline). Retry later
//     or wait longer. From Release: definitely not released; nothing was sent. Test
//     ErrUnavailable first to tell "no server could take it" from "the lock was held".
//   - ErrBusy: definitely not acquired; the server's admission is closed. Back off.
//   - ErrIndeterminate: may or may not hold. Do not act as the holder; the lock, if held,
//     ends with its lease (a known token is released in the background). Retrying is safe.
//   - ErrUnavailable: definitely not applied; no server could take it during the whole call
//     (no leader, shutting down, unreachable, not a latch server). Retry later. At the
//     deadline it comes with ErrTimeout.
//   - ErrNotHeld (Release): the lock had already expired or been released, or the token is
//     not the current one. If you were still working under it, your work may have
//     overlapped another holder: that is what the fencing token protects against.
//   - ErrUnsupportedDuration, ErrInsufficientLease, ErrBadKey: fix the input; nothing sent.
//   - ErrTokenExhausted: the server grants no more tokens; operator action needed.
//   - ErrAuth: secret, server or version mismatch; fix the configuration.
//   - ErrUnsupported (Extend, KeepAlive): the servers do not offer revision 2, or answered E
//     unsupported; nothing was extended and asking again will not help. The ticket's deadline
//     stands. ErrExtendInProgress: another extend of the ticket, or its keep-alive, is running.
//   - ErrTicketLost, ErrTicketUnconfirmed, ErrTicketEnded: how a ticket ended (its context's
//     cause, and what Extend returns after). Stop the work under it.
//   - ErrCanceled: your context was canceled before anything was sent.
//   - ErrQueueFull: too many requests wait for a connection; nothing sent. Back off.
//   - ErrClosed, ErrOwnerExhausted: this Client sends nothing any more.
//   - *ServerError: any other E answer (bad_owner, bad_range, internal: a bug somewhere,
//     the request was not applied); errors.As gives the reason.
//
// # Time
//
// Config.Clock drives every operation deadline, stamp, ticket deadline, keep-alive schedule
// and ping interval, so tests can be exact; the real clock's monotonic reading makes them
// immune to wall-clock steps. Dial, TLS and handshake timeouts, write stall timeouts,
// reconnect and retry backoff use real time. The client cannot see the server's clock. On a
// revised connection Config.Rho bounds how much faster it may run (1000 ppm by default; raise
// it where clocks are slewed faster). On a latch/1 connection no margin is applied: if the
// client's clock runs slower than the server's, a Ticket.Deadline can be late; keep a margin
// for that in the budget.
package client
