package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/wire"
)

// Config configures both sides of the peer port: Listen uses Secrets, TLS, the timeouts, the
// handshake caps and Logger; Dial uses Secrets, ClientTLS, ID, Advertise and
// HandshakeTimeout. A node passes the same Config to both.
type Config struct {
	// Secrets are the cluster's peer secrets (--peer-secret-file; never the client secrets of
	// --secret-file, or a client could talk Raft), each at least wire.MinSecretLen bytes. The
	// listener accepts a proof made with any of them; the dialer proves with the first.
	// Empty: no secret is asked for or offered.
	Secrets [][]byte

	// TLS is the listener's TLS config. Nil: no TLS. It must require and verify client
	// certificates (ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: the cluster CA)
	// and set MinVersion to tls.VersionTLS13. MutualTLS builds one.
	TLS *tls.Config

	// ClientTLS is the dialer's TLS config: a client certificate (Certificates or
	// GetClientCertificate), RootCAs: the cluster CA, MinVersion tls.VersionTLS13. If
	// ServerName is empty, Dial uses the host of the address it dials. Set exactly when TLS
	// is set.
	ClientTLS *tls.Config

	// ID and Advertise are this node's identity: its --id and the address the other nodes
	// dial (--advertise; what the Raft configuration holds for it). Dial states them inside
	// the proof (handshake version 2), so the listener knows which node the connection claims
	// to be (IdentityOf). Set both or neither; neither: Dial states nothing (version 1), as a
	// tool that is no node does, and a StreamLayer whose Admission requires an identity
	// refuses such Raft connections.
	ID        string
	Advertise string

	// HandshakeTimeout bounds the time from accept (or from the start of a dial) to the end
	// of the handshake, TLS included. A connection that has not finished by then is closed.
	// A member needs milliseconds (a few round trips); the bound is for slow networks.
	HandshakeTimeout time.Duration

	// FirstByteTimeout bounds the time from accept to the dialer's first byte: its channel
	// byte (which a member sends the moment it has read the hello) or, with TLS, its
	// ClientHello. A connection that has sent nothing by then is closed, so a silent one
	// holds its handshake slot only this long. It also marks a connection as stale: one
	// still in the handshake after this long may be evicted to make room. Zero means
	// DefaultFirstByteTimeout; it never extends HandshakeTimeout.
	FirstByteTimeout time.Duration

	// MaxHandshakes is the most accepted connections that may be in the handshake at once.
	// When it is reached a newcomer still gets in: the oldest connection that has sent
	// nothing (or is stale) of the source holding the most connections is closed to make
	// room. Only when no connection can make room is the newcomer closed.
	MaxHandshakes int

	// MaxHandshakesPerSource is the most connections in the handshake from one source (an
	// IPv4 address or an IPv6 /64). A source at its cap makes room from its own connections,
	// oldest silent first, so it cannot take slots from others. Zero means
	// DefaultMaxHandshakesPerSource; it is capped at MaxHandshakes. On one host (loopback)
	// every node is one source: the cap then protects nothing, and members get in because
	// silent connections make room first.
	MaxHandshakesPerSource int

	// Logger receives one line per rejected or failed connection. Nil: no logging.
	Logger hclog.Logger
}

// Defaults used by DefaultConfig (and for the zero values their fields document).
const (
	DefaultHandshakeTimeout       = 3 * time.Second
	DefaultFirstByteTimeout       = time.Second
	DefaultMaxHandshakes          = 1024
	DefaultMaxHandshakesPerSource = 256
)

// DefaultConfig returns a Config with the default timeout and cap, no secrets, no TLS and
// no logger: the insecure setup until the caller adds credentials.
func DefaultConfig() Config {
	return Config{
		HandshakeTimeout: DefaultHandshakeTimeout,
		MaxHandshakes:    DefaultMaxHandshakes,
	}
}

// Authenticated reports whether connections must prove themselves (a secret, TLS or both).
// When it is false anyone who can reach the peer port can talk Raft to the node; the caller
// decides whether that is allowed (loopback only, or an explicit --insecure).
func (c Config) Authenticated() bool {
	return len(c.Secrets) > 0 || c.TLS != nil
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.HandshakeTimeout <= 0 {
		return fmt.Errorf("peer: handshake timeout %v: set it above zero (default %v)", c.HandshakeTimeout, DefaultHandshakeTimeout)
	}
	if c.MaxHandshakes < 1 {
		return fmt.Errorf("peer: max handshakes %d: set it to at least 1 (default %d)", c.MaxHandshakes, DefaultMaxHandshakes)
	}
	if c.FirstByteTimeout < 0 {
		return fmt.Errorf("peer: first-byte timeout %v: set it above zero, or to zero for the default %v", c.FirstByteTimeout, DefaultFirstByteTimeout)
	}
	if c.MaxHandshakesPerSource < 0 {
		return fmt.Errorf("peer: max handshakes per source %d: set it to at least 1, or to zero for the default %d", c.MaxHandshakesPerSource, DefaultMaxHandshakesPerSource)
	}
	for i, s := range c.Secrets {
		if len(s) < wire.MinSecretLen {
			return fmt.Errorf("peer: secret %d of %d: %w", i+1, len(c.Secrets), wire.ErrSecretTooShort)
		}
	}
	if c.ID != "" || c.Advertise != "" {
		if err := c.identity().validate(); err != nil {
			return fmt.Errorf("peer: this node's identity (--id and --advertise): %w", err)
		}
	}
	if (c.TLS == nil) != (c.ClientTLS == nil) {
		return errors.New("peer: set both the listener's and the dialer's TLS config, or neither: a node both accepts and dials peer connections")
	}
	if c.TLS != nil {
		if c.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
			return errors.New("peer: the listener's TLS config must set ClientAuth: tls.RequireAndVerifyClientCert (peers prove themselves with a certificate from the cluster CA)")
		}
		if c.TLS.MinVersion < tls.VersionTLS13 || c.ClientTLS.MinVersion < tls.VersionTLS13 {
			return errors.New("peer: both TLS configs must set MinVersion: tls.VersionTLS13")
		}
		if len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil {
			return errors.New("peer: the listener's TLS config has no certificate: set Certificates or GetCertificate")
		}
		if len(c.ClientTLS.Certificates) == 0 && c.ClientTLS.GetClientCertificate == nil {
			return errors.New("peer: the dialer's TLS config has no client certificate: set Certificates or GetClientCertificate (mutual TLS)")
		}
	}
	return nil
}

// identity is the Identity Dial states.
func (c Config) identity() Identity { return Identity{ID: c.ID, Addr: c.Advertise} }

// firstByteTimeout is FirstByteTimeout or its default.
func (c Config) firstByteTimeout() time.Duration {
	if c.FirstByteTimeout == 0 {
		return DefaultFirstByteTimeout
	}
	return c.FirstByteTimeout
}

// maxPerSource is MaxHandshakesPerSource or its default, at most MaxHandshakes.
func (c Config) maxPerSource() int {
	n := c.MaxHandshakesPerSource
	if n == 0 {
		n = DefaultMaxHandshakesPerSource
	}
	return min(n, c.MaxHandshakes)
}

// logger returns c.Logger, or a logger that drops everything.
func (c Config) logger() hclog.Logger {
	if c.Logger == nil {
		return hclog.NewNullLogger()
	}
	return c.Logger
}

// MutualTLS returns the listener and dialer TLS configs for a node whose certificate cert
// (usable for both server and client auth) and whose peers' certificates are signed by ca:
// TLS 1.3 only, client certificates required and verified. The results satisfy Validate.
func MutualTLS(cert tls.Certificate, ca *x509.CertPool) (server, client *tls.Config) {
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca,
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		MinVersion:   tls.VersionTLS13,
	}
	return server, client
}
