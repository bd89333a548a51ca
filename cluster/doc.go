// Package cluster is the latch node that both modes share: it decides every acquire and
// release, keeps the FIFO waiters of each key, runs the three admission gates, and drives
// lease expiry. The TCP session loop that feeds it lives in cluster/server, the HTTP
// endpoints in cluster/admin, the Raft side in cluster/raftnode.
//
// A decision becomes a state transition of the lock table through one seam, the applier
// (applier.go): in single mode the node owns an in-memory fsm.Table and applies each
// command in place under its mutex; in cluster mode the command is proposed to the
// replicated log and its result comes back, in log order, when the leader applies its entry.
// The decisions around them (admission, waiting, who is granted next, when a lease may end)
// are the same code in both modes. Only the deciding node (single mode, or the established
// leader) keeps a view of its keys (view.go); a follower keeps none and answers nothing
// itself.
//
// Files by concept: node.go (the Node, sessions, drain, stats), acquire.go, release.go,
// extend.go (revision 2's extend, and which revisions the node serves),
// handoff.go (a freed key goes to its next waiter), waiters.go (queues and wait timers),
// expire.go (the single-mode sweep, lazy expiry, and the leader's expiry timer and lane), leader.go (Lead and Follow), view.go
// (what the deciding node knows of its keys), applier.go, admission.go, forwarded.go (a
// follower's forwarded acquire: its grant, when the session has gone, is released).
//
// What the package owns:
//   - dispatch: acquire, release and ping semantics of docs/protocol.md section 7;
//   - waiters: per-key FIFO queues, wait measured from when the frame was read;
//   - admission: pending, keys and waiters gates with 90%/75% hysteresis (section 6);
//   - expiry driving: the view's deadline heap of holders (an expiry.Heap), the single-mode
//     sweep every expiry.SweepInterval, lazy expiry when a request touches a key, and in
//     cluster mode the leader's timer at the earliest deadline, whose expiries go to the log
//     through a bounded lane (expire.go; docs/architecture.md, "Expiry").
//
// What the leader answers from its view. A cluster-mode leader decides from its view, which
// a leader change makes stale without telling it (a leader paused past its election timeout
// and resumed still believes it leads, for a few milliseconds). So each answer is either
// decided by a log entry or confirmed before it is sent:
//   - A (granted), a release's R and an extend's L: a log entry of this epoch said so. The entry committed,
//     so this node still led when it did; a later leader starts from a log that holds it.
//   - A release's N: read from the view (the token is not the key's holder, or its lease is
//     over by this leader's clock), so sent only after raft confirmed that this node still
//     led, in the same term and epoch, after the view was read (fromView in release.go:
//     raftnode's Confirm: the commit of the next entry handed to raft after the call while
//     the log is busy, else one heartbeat round, either shared by all answers waiting for it
//     and neither adding a log entry). Within one term the view knows every grant a client
//     can hold a token of, and the deadlines it counts are this leader's own, so a confirmed
//     N is true. Unconfirmed, it becomes E unavailable, which the client retries with the
//     new leader. An N decided by the log (the release's entry found another holder, or
//     none) is sent as it comes.
//   - An extend's N: read from the view (not this token's, its lease is over, or a release
//     or expiry of it is in flight) and confirmed as a release's N is; an N decided by the
//     log is sent as it comes. E unsupported (the feature switch is off) is definite.
//   - An acquire's T: with wait 0 on a key the view holds (or whose holder is being freed),
//     and a waiter's T when its wait ran out, are read from the view and confirmed the same
//     way; a T decided by an entry (the key was held when the acquire applied) is sent as it
//     comes.
//   - E busy (an admission gate), E unavailable (not leading, draining), E indeterminate and
//     E token_exhausted: busy and unavailable change nothing and promise nothing about a key;
//     indeterminate says the outcome is unknown; the last token is only ever raised by the
//     log, so a leader that saw it issued is right that every later acquire fails.
//   - P (ping) is answered by the session without the node: it says the server is alive, no
//     more.
//   - Expiry is not an answer: the leader's expiry entry names the token it ends, and the
//     table frees the key only if that token still holds it, so a stale leader's expiry can
//     end nothing a newer leader restarted (and it cannot commit in a term it lost).
//
// In single mode there is no other leader: the view is the table, and every answer is sent
// at once.
//
// What it must never do: parse bytes (package wire does), block while holding its mutex
// (replies go to a non-blocking Replier), import cluster/raftnode (cluster/member wires the two
// together), or free a lock before its lease has run out.
package cluster
