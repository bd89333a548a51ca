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
	// MaxHandshakes is the share of MaxConns that connections which have not finished the
	// handshake (no proof yet, or no hello) may hold at once: what strangers without the
	// secret can take. A newcomer over it, or over MaxConns, takes the place of the oldest
	// of them that has sent nothing (or has been in the handshake longer than a second),
	// which is answered E unavailable and closed; only when none can make room is the
	// newcomer refused. Zero: a quarter of MaxConns, at least 1.
	MaxHandshakes int
	// MaxRefusing is the most connections over the limit that are being answered
	// E unavailable at once (each lingers until its client has read the answer, up to a
	// second); the accept loop waits for one to end beyond it, so that a flood cannot take
	// more descriptors than MaxConns+MaxRefusing. Zero: 32.
	MaxRefusing int
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
	if c.MaxRefusing < 0 {
		return fmt.Errorf("max refusing %d: set it to at least 1, or 0 for %d", c.MaxRefusing, maxRefusing)
	}
	if c.MaxHandshakes < 0 || c.MaxHandshakes > c.MaxConns {
		return fmt.Errorf("max handshakes %d: set it between 1 and --max-conns (%d), or 0 for a quarter of --max-conns", c.MaxHandshakes, c.MaxConns)
	}
	return nil
}

// maxRefusing is MaxRefusing or its default.
func (c Config) maxRefusing() int {
	if c.MaxRefusing > 0 {
		return c.MaxRefusing
	}
	return maxRefusing
}

// maxHandshakes is MaxHandshakes or its default.
func (c Config) maxHandshakes() int {
	if c.MaxHandshakes > 0 {
		return c.MaxHandshakes
	}
	return max(1, c.MaxConns/4)
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
