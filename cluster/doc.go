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
// handoff.go (a freed key goes to its next waiter), waiters.go (queues and wait timers),
// expire.go (the single-mode sweep, lazy expiry, and the leader's expiry timer and lane), leader.go (Lead and Follow), view.go
// (what the deciding node knows of its keys), applier.go, admission.go.
//
// What the package owns:
//   - dispatch: acquire, release and ping semantics of docs/protocol.md section 7;
//   - waiters: per-key FIFO queues, wait measured from when the frame was read;
//   - admission: pending, keys and waiters gates with 90%/75% hysteresis (section 6);
//   - expiry driving: the view's deadline heap of holders (an expiry.Heap), the single-mode
//     sweep every expiry.SweepInterval, lazy expiry when a request touches a key, and in
//     cluster mode the leader's timer at the earliest deadline, whose expiries go to the log
//     through a bounded lane (expire.go; DESIGN.md, Expiry).
//
// What it must never do: parse bytes (package wire does), block while holding its mutex
// (replies go to a non-blocking Replier), import cluster/raftnode (cluster/member wires the two
// together), or free a lock before its lease has run out.
package cluster
