package single

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/server"
)

// Config configures a single-mode Node. Build one with DefaultConfig and set the
// credentials; Start calls Validate. The sub-configs are the packages' own; Start fills in
// what wires them together (noted on each field), so leave those unset.
type Config struct {
	// Node configures the lock node: limits, token floor, logger, audit, metrics. Metrics
	// nil: Start makes a set (Node.Metrics returns it). Replicated must be nil: single mode
	// applies locally.
	Node cluster.Config

	// Server configures the client-protocol server: Secrets (--secret-file), MaxConns,
	// MaxRefusing, Logger. Metrics nil: Node.Metrics.
	Server server.Config

	// Listen is the client address (--listen). Required. TLS, if set, serves it over TLS;
	// the handshakes run in each session, inside its deadline.
	Listen string
	TLS    *tls.Config

	// HTTP is the health, readiness, metrics and admin address (--http). Required. HTTPTLS,
	// if set, serves it over TLS (--http-tls), inside the connection cap, which counts TCP
	// connections.
	HTTP    string
	HTTPTLS *tls.Config

	// HTTPServer bounds the HTTP server (timeouts, header size, the connection cap within
	// the open-files limit). Zero fields take admin.DefaultHTTPConfig's values; Logger nil:
	// Logger's "http".
	HTTPServer admin.HTTPConfig

	// HTTPHosts (--http-allowed-host) are names, besides IP addresses, localhost and the
	// node's own (the host of HTTP, the hostname when HTTP is 0.0.0.0), that requests to HTTP
	// may give as Host: a proxy's or a Service's (admin.NewHosts).
	HTTPHosts []string

	// Admin is the admin side (admin.LocalOptions): Boot, the operator's credential and
	// whether the node has another credential. Start sets HTTP, Insecure and Hosts from the
	// fields here.
	Admin admin.LocalConfig

	// Insecure allows a non-loopback --listen that no client secret protects, and lock
	// calls on a non-loopback --http that no credential protects (--insecure).
	Insecure bool

	// Pprof serves Go's profiler under /debug/pprof/ on HTTP (--pprof).
	Pprof bool

	// Logger is the base logger (admin's warnings; "http" for HTTP). Nil: no logging.
	Logger hclog.Logger
}

// DefaultConfig returns each part's defaults and latch's default addresses.
func DefaultConfig() Config {
	return Config{
		Node:       cluster.DefaultConfig(),
		Server:     server.Config{MaxConns: server.DefaultMaxConns},
		Listen:     "127.0.0.1:7400",
		HTTP:       "127.0.0.1:7402",
		HTTPServer: admin.DefaultHTTPConfig(),
	}
}

// Validate reports the first setting that cannot work, naming the flag to change.
func (c Config) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("single mode needs --listen")
	case c.HTTP == "":
		return errors.New("single mode needs --http")
	case c.Node.Replicated != nil:
		return errors.New("single mode applies locally: leave Node.Replicated unset")
	}
	if _, err := admin.NewHosts(c.HTTP, c.HTTPHosts...); err != nil {
		return fmt.Errorf("--http-allowed-host %w", err)
	}
	return server.CheckListen(c.Listen, len(c.Server.Secrets) > 0, c.Insecure)
}

// Node is a running single-mode node: the lock node, its server on the client listener and
// the HTTP server on the --http listener. Stop ends it all.
type Node struct {
	log    hclog.Logger
	node   *cluster.Node
	srv    *server.Server
	hs     *http.Server
	ln     net.Listener // client listener (TLS inside, if any)
	hln    net.Listener // HTTP listener (capped, TLS inside the cap, if any)
	hosts  admin.Hosts
	served chan error     // each Serve's return, buffered for both
	wg     sync.WaitGroup // the two Serve goroutines
}

// Start builds the node and its server, runs the node's loop, opens the client and HTTP
// listeners and serves both. An error closes what it had opened.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.Node.Metrics == nil {
		cfg.Node.Metrics = cluster.NewMetrics()
	}
	if cfg.Server.Metrics == nil {
		cfg.Server.Metrics = cfg.Node.Metrics
	}
	cfg.Admin.Hosts, _ = admin.NewHosts(cfg.HTTP, cfg.HTTPHosts...) // checked by Validate
	cfg.Admin.HTTP, cfg.Admin.Insecure = cfg.HTTP, cfg.Insecure
	n := &Node{log: log, hosts: cfg.Admin.Hosts, served: make(chan error, 2)}
	var err error
	if n.node, err = cluster.NewNode(cfg.Node); err != nil {
		return nil, err
	}
	if n.srv, err = server.New(cfg.Server, n.node); err != nil {
		n.node.Close()
		return nil, err
	}
	go n.node.Run()
	if err := n.listen(cfg); err != nil {
		n.node.Close()
		return nil, err
	}
	// /v1/status names this node's run (boot): a signed admin call is good for it only. It
	// reveals no key names and no lock contents (docs/SECURITY.md).
	opts := admin.LocalOptions(n.node, cfg.Admin, log)
	opts.Pprof = cfg.Pprof
	hcfg := cfg.HTTPServer
	if hcfg.Logger == nil {
		hcfg.Logger = log.Named("http")
	}
	cfg.Node.Metrics.RegisterReady(n.Ready)
	n.hs, n.hln = admin.NewHTTPServer(admin.Handler(cfg.Node.Metrics.Registry, n.Ready, opts), n.hln, hcfg)
	if cfg.HTTPTLS != nil {
		n.hln = tls.NewListener(n.hln, cfg.HTTPTLS) // inside the cap, which counts TCP connections
	}
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.served <- n.srv.Serve(n.ln) }()
	go func() { defer n.wg.Done(); n.served <- n.hs.Serve(n.hln) }()
	return n, nil
}

// listen opens the client listener (with TLS, if set) and the HTTP listener.
func (n *Node) listen(cfg Config) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS) // handshakes run in each session, inside its deadline
	}
	hln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--http: %w", err)
	}
	n.ln, n.hln = ln, hln
	return nil
}

// Ready is nil while the node takes requests: from Start until the drain begins.
func (n *Node) Ready() error {
	if n.node.Stats().Draining {
		return errors.New("shutting down")
	}
	return nil
}

// Failed receives the error of a listener whose serving ended before Stop: the caller then
// stops the node. After Stop it holds the two loops' returns (server.ErrServerClosed,
// http.ErrServerClosed) that the caller did not take.
func (n *Node) Failed() <-chan error { return n.served }

// Addr is the client listener's address.
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// HTTPAddr is the HTTP listener's address.
func (n *Node) HTTPAddr() net.Addr { return n.hln.Addr() }

// Hosts are the names HTTP answers to (HTTPHosts with the node's own).
func (n *Node) Hosts() admin.Hosts { return n.hosts }

// Node is the lock node.
func (n *Node) Node() *cluster.Node { return n.node }

// Server is the client-protocol server.
func (n *Node) Server() *server.Server { return n.srv }

// Stop ends the node in order: the server drains (the listener closes; waiters and new
// acquires are answered E unavailable while every connection is still read) and its
// sessions flush and close (bounded by ctx), the node closes, then HTTP shuts down (bounded
// by ctx; readiness says "shutting down" from the drain on). It returns the sessions'
// shutdown error.
func (n *Node) Stop(ctx context.Context) error {
	serr := n.srv.Shutdown(ctx)
	n.node.Close()
	n.hs.Shutdown(ctx)
	n.wg.Wait() // both listeners are closed: their Serve loops have returned
	return serr
}
