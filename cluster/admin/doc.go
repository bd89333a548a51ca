// Package admin is a node's HTTP side: /healthz (the process serves), /readyz (the node can
// take requests now), /metrics (Prometheus text format, from the node's own registry),
// /v1/status, and in cluster mode /v1/peers (list, add, remove). Changes of membership are
// signed with the cluster secret (auth.go) and forwarded to the leader over the peer port's
// admin channel (ServeChannel, CallChannel).
//
// It must never serve the lock protocol or change lock state.
package admin
