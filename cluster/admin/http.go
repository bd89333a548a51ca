package admin

import (
	"errors"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options select optional endpoints.
type Options struct {
	// Pprof serves Go's profiler under /debug/pprof/ (off by default: it exposes internals).
	Pprof bool
	// Status, if set, is served as JSON at GET /v1/status.
	Status func() any
	// Cluster, if set, serves membership at /v1/peers and backups at /v1/snapshot and
	// /v1/restore; changes and backups are checked by Verifier (nil: every call passes).
	Cluster  Cluster
	Verifier *Verifier
	// Locks, if set, serves lock inspection at GET /v1/locks and /v1/locks/show, and forced
	// release at POST /v1/locks/release, all for the operator only (checked by Verifier).
	Locks Locks
	// LocksOff, when Locks is nil, is why they are off on this node: the three lock
	// endpoints answer it with 403.
	LocksOff error
	// Hosts are the names requests may give as Host (browser.go): every request but the
	// probes is refused when its Host is none of them, when a web page of another origin
	// sent it, or when it is a POST that any page could send. The zero value allows IP
	// addresses and localhost.
	Hosts Hosts
}

// Handler returns the HTTP handler of a node. ready reports why the node cannot take
// requests now, or nil when it can. Every request but the probes (/healthz, /readyz,
// /metrics) passes o.Hosts' browser rules first (browser.go).
func Handler(reg *prometheus.Registry, ready func() error, o Options) http.Handler {
	mux := http.NewServeMux()
	if o.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if o.Status != nil {
		mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, o.Status()) })
	}
	v := o.Verifier
	if v == nil {
		v = NewVerifier(Target{}, Credentials{}, nil)
	}
	switch {
	case o.Locks != nil:
		locks(mux, o.Locks, v)
	case o.LocksOff != nil:
		off := func(w http.ResponseWriter, _ *http.Request) { writeErr(w, http.StatusForbidden, o.LocksOff) }
		for _, p := range []string{"GET /v1/locks", "GET /v1/locks/show", "POST /v1/locks/release"} {
			mux.HandleFunc(p, off)
		}
	}
	if o.Cluster == nil {
		notCluster := func(w http.ResponseWriter, _ *http.Request) {
			writeErr(w, http.StatusNotFound, errors.New("admin: this is a single-mode server: membership, backups and restores "+
				"are cluster-mode features (its state lives in memory; restart it with --token-floor to keep tokens rising)"))
		}
		for _, p := range []string{"/v1/peers", "/v1/peers/{id}", "/v1/snapshot", "/v1/restore"} {
			mux.HandleFunc(p, notCluster)
		}
	}
	if o.Cluster != nil {
		membership(mux, o.Cluster, v)
		snapshots(mux, o.Cluster, v)
	}
	return guard(withCaller(mux), o.Hosts)
}
