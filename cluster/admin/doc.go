// Package admin is a node's HTTP side: /healthz (the process serves), /readyz (the node can
// take requests now), /metrics (Prometheus text format, from the node's own registry),
// /v1/status, and in cluster mode /v1/peers (list, add, remove), /v1/snapshot (a backup) and
// /v1/restore, and in both modes /v1/locks (lock inspection and forced release, locks.go).
// The reads are open and reveal no key names, except /v1/locks, which like changes and
// backups needs the operator's credential (an admin secret or a certificate of the admin CA), and a peer's
// credential may only add or promote its own node (auth.go, docs/SECURITY.md). A signature
// names the node and the run it is for and covers a digest of the body, so it is checked
// before any body is read and cannot be replayed elsewhere or later. Changes are forwarded to
// the leader over the peer port's admin channel (ServeChannel, CallChannel), which the peer
// credential authenticates: the leader does not check again what the follower verified, and
// its answer comes back whole (outcome and status: statusOf), so a follower answers a change
// with the status the leader gives it.
//
// Every request but the probes (/healthz, /readyz, /metrics) must also not come from a web
// page (browser.go): its Host is an IP address, localhost or a name of the node (Hosts,
// against DNS rebinding), a browser's Origin is the node itself, and a POST declares a
// JSON or binary body or is signed, which no page can send without a CORS preflight that
// latch never grants. That holds on a node with no credential at all, so a browser on its
// host cannot free a lock or restore a backup for a page it shows. A single-mode node with
// a credential but not the operator's turns the lock calls off (LocalOptions).
//
// It never serves the lock protocol, never takes the client secret as a credential, and
// changes lock state only by a restore, which the leader's raft node carries out.
package admin
