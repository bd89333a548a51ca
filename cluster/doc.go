// Package cluster is the latch node that both modes share: it decides every acquire and
// release, keeps the FIFO waiters of each key, runs the three admission gates, and drives
// lease expiry. The TCP session loop that feeds it lives in cluster/server, the HTTP
// endpoints in cluster/admin.
//
// A single-mode server is a Node whose commands are applied in place to an in-memory
// fsm.Table under the node's mutex: a grant, a release or an expiry is one table call. Cluster
// mode (Raft) will route the same commands through the replicated log instead; the decisions
// around them (admission, waiting, who is granted next, when a lease may end) stay here.
//
// What the package owns:
//   - dispatch: acquire, release and ping semantics of PROTOCOL.md section 7;
//   - waiters: per-key FIFO queues, wait measured from when the frame was read;
//   - admission: pending, keys and waiters gates with 90%/75% hysteresis (section 6);
//   - expiry driving: a token-validated deadline heap (package expiry), the single-mode
//     sweep every expiry.SweepInterval, and lazy expiry when a request touches a key.
//
// What it must never do: parse bytes (package wire does), block while holding its mutex
// (replies go to a non-blocking Replier), or free a lock before its lease has run out.
package cluster
