package bench

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
)

// Open refuses a setup that cannot run before it dials, and against a real server makes one
// single-connection client per worker that answers a ping; closing them ends them.
func TestSetupOpen(t *testing.T) {
	ts := servertest.Start(t, cluster.DefaultConfig(), server.Config{})
	ok := Setup{Client: client.Config{Servers: []string{ts.Addr}}, Clients: 3, Keys: 2, Duration: time.Second,
		Options: client.AcquireOptions{Wait: time.Second, Lease: 30 * time.Second}}
	for name, s := range map[string]Setup{
		"no clients":       func() Setup { s := ok; s.Clients = 0; return s }(),
		"no keys":          func() Setup { s := ok; s.Keys = 0; return s }(),
		"no window":        func() Setup { s := ok; s.Duration = 0; return s }(),
		"over an hour":     func() Setup { s := ok; s.Warmup = MaxRun; return s }(),
		"holders no conns": func() Setup { s := ok; s.Holders = 1; return s }(),
		"holders' lease": func() Setup {
			s := ok
			s.Holders, s.HolderConns, s.Every, s.HoldLease = 1, 1, time.Second, time.Second
			return s
		}(),
		"no servers": func() Setup { s := ok; s.Client.Servers = nil; return s }(),
	} {
		if _, _, err := s.Open(context.Background()); !errors.Is(err, ErrSetup) {
			t.Errorf("%s: %v, want ErrSetup", name, err)
		}
	}
	cfg, closeAll, err := ok.Open(context.Background())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if len(cfg.Clients) != 3 || cfg.Keys != 2 || cfg.Duration != time.Second || cfg.Holders.Count != 0 {
		t.Fatalf("config %+v", cfg)
	}
	for _, cl := range cfg.Clients {
		if st := cl.Stats(); st.ConnsOpen > 1 {
			t.Fatalf("a worker's client has %d connections, want 1", st.ConnsOpen)
		}
	}
	closeAll()
	if err := cfg.Clients[0].Ping(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Ping after closing: %v, want ErrClosed", err)
	}
}

// The workers spread over the servers: with three separate single-mode servers, three
// workers each take the same key at once, which they can only if no two share a server.
func TestSetupSpreadsWorkers(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, servertest.Start(t, cluster.DefaultConfig(), server.Config{}).Addr)
	}
	s := Setup{Client: client.Config{Servers: addrs}, Clients: 3, Keys: 1, Duration: time.Second}
	cfg, closeAll, err := s.Open(context.Background())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer closeAll()
	for i, cl := range cfg.Clients {
		if _, err := cl.Acquire(context.Background(), "shared", 0, client.AcquireOptions{Lease: 30 * time.Second}); err != nil {
			t.Fatalf("worker %d: %v (two workers are on one server)", i, err)
		}
	}
	if got := rotate([]string{"a", "b", "c"}, 4); len(got) != 3 || got[0] != "b" || got[2] != "a" {
		t.Fatalf("rotate by 4: %v", got)
	}
}

// CPUProfile profiles between the window's open and close; a second profile at once cannot
// start, is reported, and its close does nothing.
func TestCPUProfile(t *testing.T) {
	var first, second bytes.Buffer
	var warned error
	done := CPUProfile(&first, func(err error) { t.Fatalf("first profile: %v", err) })()
	CPUProfile(&second, func(err error) { warned = err })()()
	done()
	if first.Len() == 0 || second.Len() != 0 || warned == nil {
		t.Fatalf("profiles of %d and %d bytes, warning %v; want the first only, the second refused", first.Len(), second.Len(), warned)
	}
}
