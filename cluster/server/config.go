package server

import (
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
)

// Config configures a Server.
type Config struct {
	// Secrets are the accepted handshake secrets (from --secret-file); clients prove any one
	// of them and the server answers with the same. Empty: no auth is asked for.
	Secrets [][]byte
	// MaxConns is the most client connections served at once; more are answered
	// E unavailable and closed.
	MaxConns int
	// Logger receives one line per event. Nil: no logging.
	Logger hclog.Logger
	// Metrics records connections and frame errors. Nil: the node's own are not shared.
	Metrics *cluster.Metrics
	// Router forwards acquires and releases while the local node is not the leader (cluster
	// mode). Nil: the node decides every request (single mode).
	Router Router
}

// DefaultMaxConns is the connection limit when none is configured.
const DefaultMaxConns = 10_000

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.MaxConns < 1 {
		return fmt.Errorf("max connections %d: set --max-conns to at least 1", c.MaxConns)
	}
	return nil
}

// ErrInsecureListen is returned by CheckListen for a non-loopback address without a secret.
var ErrInsecureListen = errors.New("refusing to serve a non-loopback address without a secret: anyone who can reach it could take and release locks; pass --secret-file FILE, or --insecure if the network is trusted")

// CheckListen refuses to listen on an address other hosts can reach unless the server asks
// for a secret or insecure is set. Loopback means 127.0.0.0/8, ::1 or a name that resolves
// only to those.
func CheckListen(addr string, haveSecret, insecure bool) error {
	if haveSecret || insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if host != "" {
		if ips, err = net.LookupIP(host); err != nil {
			return fmt.Errorf("listen address %q: %w", addr, err)
		}
	}
	if len(ips) == 0 {
		return fmt.Errorf("listen address %q (all interfaces): %w", addr, ErrInsecureListen)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("listen address %q: %w", addr, ErrInsecureListen)
		}
	}
	return nil
}
