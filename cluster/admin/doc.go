// Package admin is a node's HTTP side: /healthz (the process serves), /readyz (the node can
// take requests now), /metrics (Prometheus text format, from the node's own registry),
// /v1/status, and in cluster mode /v1/peers (list, add, remove), /v1/snapshot (a backup) and
// /v1/restore. Changes and backups are signed with the cluster secret or, where the node
// verifies client certificates, made with one (auth.go); they are forwarded to the leader over
// the peer port's admin channel (ServeChannel, CallChannel).
//
// It must never serve the lock protocol, and changes lock state only by a restore, which the
// leader's raft node carries out.
package admin
