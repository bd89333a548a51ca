// Package admin is a node's HTTP side: /healthz (the process serves), /readyz (the node can
// take requests now) and /metrics (Prometheus text format, from the node's own registry).
// Cluster mode adds status, membership and snapshot endpoints here.
//
// It must never serve the lock protocol or change lock state.
package admin
