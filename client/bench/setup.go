package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/latchd/latch/client"
)

// MaxRun bounds a run's warm-up plus window.
const MaxRun = time.Hour

// ErrSetup is Open's error for a Setup that cannot run (wrapped with what is wrong): nothing
// was sent.
var ErrSetup = errors.New("bench: cannot run")

// Setup is a run as asked for, before any client exists: what `latch bench` flags say. Open
// checks it and makes its clients; its errors name those flags.
type Setup struct {
	// Client is every client's config; Open sets Conns (1 for each worker, HolderConns for
	// the holders).
	Client client.Config
	// Clients is the number of workers, each with a client of its own; Keys, Prefix, Options,
	// Warmup and Duration are Config's.
	Clients, Keys    int
	Prefix           string
	Options          client.AcquireOptions
	Warmup, Duration time.Duration
	// Holders are the extenders (Holders' Count, Every, Lease; their Wait is Options.Wait),
	// all on one client of HolderConns connections. 0: none.
	Holders     int
	HolderConns int
	Every       time.Duration
	HoldLease   time.Duration
	Spread      bool // Holders.Spread
}

// Open checks s, makes the clients and checks that a server answers (a ping) and, with
// holders, that it offers protocol revision 2 (ErrNoRevision2). It returns the run's Config,
// without Progress and Measure, and the func that closes its clients. Errors: ErrSetup
// (wrapped) for a setup that cannot run, ErrNoRevision2, or the ping's client error.
func (s Setup) Open(ctx context.Context) (Config, func(), error) {
	switch {
	case s.Clients < 1 || s.Keys < 1 || s.Duration <= 0 || s.Warmup < 0:
		return Config{}, nil, fmt.Errorf("%w: --clients and --keys must be at least 1, --duration above 0", ErrSetup)
	case s.Warmup+s.Duration > MaxRun:
		return Config{}, nil, fmt.Errorf("%w: --duration plus --warmup is limited to %v", ErrSetup, MaxRun)
	case s.Holders > 0 && s.HolderConns < 1:
		return Config{}, nil, fmt.Errorf("%w: --extend-conns must be at least 1", ErrSetup)
	}
	var cls []*client.Client
	closeAll := func() {
		for _, cl := range cls {
			cl.Close()
		}
	}
	newClient := func(conns, first int) (*client.Client, error) {
		cfg := s.Client
		cfg.Conns = conns
		cfg.Servers = rotate(s.Client.Servers, first)
		cl, err := client.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", ErrSetup, strings.TrimPrefix(err.Error(), "latch: "))
		}
		cls = append(cls, cl)
		return cl, nil
	}
	cfg := Config{Keys: s.Keys, Prefix: s.Prefix, Options: s.Options, Warmup: s.Warmup, Duration: s.Duration,
		Holders: Holders{Count: s.Holders, Every: s.Every, Lease: s.HoldLease, Wait: s.Options.Wait, Spread: s.Spread}}
	for i := range s.Clients {
		// One connection per worker. A client's connections start at its first server, so
		// worker i's list starts at server i: the workers spread over the nodes as many
		// processes would, rather than all meeting on the first.
		cl, err := newClient(1, i)
		if err != nil {
			closeAll()
			return Config{}, nil, err
		}
		cfg.Clients = append(cfg.Clients, cl)
	}
	var err error
	if s.Holders > 0 {
		if cfg.Holders.Client, err = newClient(s.HolderConns, 0); err != nil {
			closeAll()
			return Config{}, nil, err
		}
	}
	if err := cfg.Holders.Validate(); err != nil {
		closeAll()
		return Config{}, nil, fmt.Errorf("%w: --extenders: %w", ErrSetup, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err = cfg.Clients[0].Ping(pctx); err == nil {
		err = cfg.Holders.Ready(pctx)
	}
	if err != nil {
		closeAll()
		return Config{}, nil, err
	}
	return cfg, closeAll, nil
}

// rotate returns servers starting at index first (modulo its length), wrapping round.
func rotate(servers []string, first int) []string {
	if len(servers) == 0 {
		return servers
	}
	first %= len(servers)
	return append(append([]string(nil), servers[first:]...), servers[:first]...)
}

// CPUProfile is a Config.Measure that writes a CPU profile of the window (runtime/pprof) to
// w; when the profile cannot start, warn is told and the window runs unprofiled.
func CPUProfile(w io.Writer, warn func(error)) func() func() {
	return func() func() {
		if err := pprof.StartCPUProfile(w); err != nil {
			warn(err)
			return func() {}
		}
		return pprof.StopCPUProfile
	}
}
