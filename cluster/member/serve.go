package member

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/latchd/latch/cluster/admin"
)

// ServeConfig is where a started member serves clients: the client-protocol server on
// Listen, and the admin HTTP on the member's Config.HTTP (with Config.HTTPTLS).
type ServeConfig struct {
	// Listen is the client address (--listen). TLS, if set, serves it over TLS; the
	// handshakes run in each session, inside its deadline.
	Listen string
	TLS    *tls.Config
	// Boot is this run's boot id (admin.NewBootID), Pprof serves Go's profiler on HTTP
	// (--pprof): AdminOptions with them.
	Boot  string
	Pprof bool
}

// serving is what Serve opened; Stop shuts its HTTP down last and waits for both loops.
type serving struct {
	hs      *http.Server
	ln, hln net.Listener
	served  chan error     // each Serve's return, buffered for both
	wg      sync.WaitGroup // the two Serve goroutines
}

// Serve opens the client listener and the HTTP listener and serves both until Stop: the
// client-protocol server (Server) and the admin HTTP (AdminOptions), ready while the node is
// not draining and Ready holds. Call it once, after Start; an error closes what it opened.
func (m *Member) Serve(cfg ServeConfig) error {
	s := &serving{served: make(chan error, 2)}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS) // handshakes run in each session, inside its deadline
	}
	hln, err := net.Listen("tcp", m.cfg.HTTP)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--http: %w", err)
	}
	ready := func() error {
		if m.node.Stats().Draining {
			return errors.New("shutting down")
		}
		return m.Ready()
	}
	m.Metrics().RegisterReady(ready)
	// /v1/status names this node and its run (boot): a signed admin call is good for them
	// only. It reveals no key names and no lock contents (docs/SECURITY.md).
	opts := m.AdminOptions(cfg.Boot)
	opts.Pprof = cfg.Pprof
	s.hs, s.hln = admin.NewHTTPServer(admin.Handler(m.Metrics().Registry, ready, opts), hln, m.cfg.HTTPServer)
	if m.cfg.HTTPTLS != nil {
		s.hln = tls.NewListener(s.hln, m.cfg.HTTPTLS) // inside the cap, which counts TCP connections
	}
	s.ln = ln
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.served <- m.srv.Serve(s.ln) }()
	go func() { defer s.wg.Done(); s.served <- s.hs.Serve(s.hln) }()
	m.serving = s
	return nil
}

// Addr is the client listener's address (nil before Serve).
func (m *Member) Addr() net.Addr {
	if m.serving == nil {
		return nil
	}
	return m.serving.ln.Addr()
}

// HTTPAddr is the HTTP listener's address (nil before Serve).
func (m *Member) HTTPAddr() net.Addr {
	if m.serving == nil {
		return nil
	}
	return m.serving.hln.Addr()
}

// Hosts are the names HTTP answers to (AdminOptions).
func (m *Member) Hosts() admin.Hosts { h, _ := m.cfg.hosts(); return h }

// Failed receives the error of a listener whose serving ended before Stop (nil channel
// before Serve): the caller then stops the member.
func (m *Member) Failed() <-chan error {
	if m.serving == nil {
		return nil
	}
	return m.serving.served
}
