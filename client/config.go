package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/latchd/latch/wire"
)

// Config configures a Client. Only Servers is required.
type Config struct {
	// Servers are host:port addresses of latch nodes (any node of a cluster). Connections
	// are spread over them round-robin and fail over to the next one.
	Servers []string
	// Secret is the shared handshake secret (at least 32 bytes). Nil: no auth. With a
	// secret the client refuses a server whose hello does not ask for auth (no downgrade)
	// and checks the server's own proof, so a fake server cannot hand out fake tokens.
	Secret []byte
	// SecretFile is an alternative to Secret: the first secret of the file (one per line,
	// as for the server; see wire.ParseSecrets) is used. Set at most one of the two. A file
	// its group or others may write is refused, as the server refuses one (wire.ReadKeyFile).
	SecretFile string
	// TLS, when set, wraps every connection in TLS with this configuration. An empty
	// ServerName is filled from the server's host.
	TLS *tls.Config
	// Conns is the number of connections kept open (the pool), default 2.
	Conns int
	// DialTimeout bounds one dial plus TLS and latch handshakes, default 5 s.
	DialTimeout time.Duration
	// QueueSize bounds the local queue of acquires and pings not yet sent, default 1024.
	// When it is full, Acquire and Ping return ErrQueueFull at once and send nothing.
	// Releases are never refused for a full queue.
	QueueSize int
	// CompensationQueue bounds the compensating releases in progress (see Acquire),
	// default 1024. When it is full a compensation is dropped, counted in
	// Stats.CompensationsDropped, and the token is left to end with its lease.
	CompensationQueue int
	// PingInterval is how often a connection on which nothing was read is pinged, default
	// 10 s. A ping not answered within IOTimeout closes the connection (it is replaced).
	PingInterval time.Duration
	// Logger receives connection events and anomalies. Nil: no logging.
	Logger *slog.Logger
	// FirstOwner is where the owner counter starts (for tests of its wrap-around);
	// 0 means 1.
	FirstOwner uint64
	// Clock is the time source of every operation deadline, wait stamp, ticket deadline and
	// ping interval. Nil means the real (monotonic) clock. Dial timeouts, write stall
	// timeouts and reconnect backoff always use the real clock.
	Clock Clock
	// Rho bounds how much faster the server's clock may run than this client's, as a
	// fraction: a span of the server's time is taken to be at least (1 - Rho) as long on
	// the client's clock. It shortens every deadline counted on a connection with protocol
	// revision 2 (a grant's age and lease, an extension's lease), rounded down to the
	// nanosecond: 30 ms of a 30 s lease at the default. 0 means DefaultRho (0.001, 1000
	// ppm: two clocks each within the kernel's 500 ppm NTP slew limit); otherwise MinRho..
	// MaxRho. Raise it on hosts whose clock may be slewed faster (chrony's maxslewrate, a
	// VM corrected after a pause). It is applied to the nanosecond per second (parts per
	// billion). Tickets granted on a latch/1 connection keep latch/1's deadline,
	// written_at + lease, with no margin.
	Rho float64
	// Latch1Only makes every hello latch/1's (flags 0): the client does not offer protocol
	// revision 2 (wire.FlagLeases), so grants carry no age and Extend and KeepAlive return
	// ErrUnsupported. By default the client offers the revision; a server that does not
	// implement it ignores the offer, and the connection is latch/1 byte for byte after the
	// hello.
	Latch1Only bool
}

// Clock is the client's time source. Times it returns are compared with each other only,
// never with the wall clock, so the real clock's monotonic reading makes every deadline
// immune to wall-clock steps.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed (at once if d <= 0) and
	// returns a function that stops it, reporting whether it stopped the call before it ran.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realClock is the process clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Defaults of the Config fields left zero.
const (
	DefaultConns             = 2
	DefaultDialTimeout       = 5 * time.Second
	DefaultQueueSize         = 1024
	DefaultCompensationQueue = 1024
	DefaultPingInterval      = 10 * time.Second
	DefaultRho               = 0.001
)

// The range of Config.Rho: from 1 ppm (better than any quartz clock keeps without
// discipline) to 10% (beyond chrony's default maxslewrate of 83 333 ppm).
const (
	MinRho = 1e-6
	MaxRho = 0.1
)

// Reconnect backoff (real time): after every server of the list failed once in a row, or after
// a connection that lived less than backoffReset, a slot sleeps, doubling from minBackoff up to
// maxBackoff.
const (
	minBackoff   = 50 * time.Millisecond
	maxBackoff   = 2 * time.Second
	backoffReset = time.Second
)

// writeStallTimeout bounds one write to a connection (real time): a peer that accepts no
// bytes for that long is closed.
const writeStallTimeout = 5 * time.Second

// withDefaults returns cfg with zero fields filled and the secret loaded, or the first setting
// that cannot work.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Servers) == 0 {
		return cfg, errors.New("latch client: no servers; pass --servers host:port,... (in Go: Config.Servers) naming latch nodes")
	}
	cfg.Servers = append([]string(nil), cfg.Servers...)
	for _, s := range cfg.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return cfg, fmt.Errorf("latch client: server %q is not host:port: %w", s, err)
		}
	}
	if cfg.Secret != nil && cfg.SecretFile != "" {
		return cfg, errors.New("latch client: both a secret and a secret file are set; use one (in Go: Config.Secret or Config.SecretFile)")
	}
	if cfg.SecretFile != "" {
		// The server's rule for key files: one its group or others may write is refused.
		// A file others may read is accepted (the library has no logger to warn on).
		data, _, err := wire.ReadKeyFile(cfg.SecretFile)
		if err != nil {
			return cfg, fmt.Errorf("latch client: secret file: %w", err)
		}
		secrets, err := wire.ParseSecrets(data)
		if err != nil {
			return cfg, fmt.Errorf("latch client: secret file %s: %w", cfg.SecretFile, err)
		}
		cfg.Secret = secrets[0]
	} else if cfg.Secret != nil {
		if len(cfg.Secret) < wire.MinSecretLen {
			return cfg, fmt.Errorf("latch client: %w", wire.ErrSecretTooShort)
		}
		cfg.Secret = append([]byte(nil), cfg.Secret...)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"Conns", &cfg.Conns, DefaultConns}, {"QueueSize", &cfg.QueueSize, DefaultQueueSize}, {"CompensationQueue", &cfg.CompensationQueue, DefaultCompensationQueue}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return cfg, fmt.Errorf("latch client: %s %d is negative; use 0 for the default %d", f.name, *f.v, f.def)
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"DialTimeout", &cfg.DialTimeout, DefaultDialTimeout}, {"PingInterval", &cfg.PingInterval, DefaultPingInterval}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return cfg, fmt.Errorf("latch client: %s %v is negative; use 0 for the default %v", f.name, *f.v, f.def)
		}
	}
	switch {
	case cfg.Rho == 0:
		cfg.Rho = DefaultRho
	case !(cfg.Rho >= MinRho && cfg.Rho <= MaxRho): // NaN too
		return cfg, fmt.Errorf("latch client: Rho %v is outside %v..%v; use 0 for the default %v (1000 ppm)", cfg.Rho, MinRho, MaxRho, DefaultRho)
	}
	if cfg.FirstOwner == 0 {
		cfg.FirstOwner = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TLS != nil {
		cfg.TLS = cfg.TLS.Clone()
	}
	return cfg, nil
}
