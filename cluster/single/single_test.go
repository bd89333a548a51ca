package single_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/single"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret, _, _ = clustertest.Secrets()

// start starts a node on ports the OS picks, with a client secret, and stops it when the
// test ends (a second Stop after the test's own is harmless).
func start(t *testing.T) *single.Node {
	t.Helper()
	cfg := single.DefaultConfig()
	cfg.Listen, cfg.HTTP = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Server.Secrets = [][]byte{secret}
	cfg.HTTPHosts = []string{"proxy.example"}
	log := clustertest.Logger(t, "latch", hclog.Debug)
	cfg.Logger, cfg.Node.Logger, cfg.Server.Logger = log, log.Named("node"), log.Named("server")
	n, err := single.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stop(t, n) })
	return n
}

func stop(t *testing.T, n *single.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// get fetches path from the node's HTTP and returns the status and body.
func get(t *testing.T, n *single.Node, path string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + n.HTTPAddr().String() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// dial opens a client connection and makes the handshake with the node's secret.
func dial(t *testing.T, n *single.Node) *wiretest.Conn {
	t.Helper()
	c := wiretest.Dial(t, n.Addr().String())
	c.Hello(t, secret)
	return c
}

// Start serves the protocol on Listen (with the server's secret) and health, readiness,
// metrics and status on HTTP; Stop closes both.
func TestStartServesAndStopCloses(t *testing.T) {
	n := start(t)
	if code, body := get(t, n, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d %q before any stop, want 200", code, body)
	}
	if code, _ := get(t, n, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d, want 200", code)
	}
	c := dial(t, n)
	tok := c.Grant(t, 1, 0, 30, "k")
	if code, body := get(t, n, "/metrics"); code != http.StatusOK || !strings.Contains(body, "latch_") {
		t.Fatalf("/metrics %d without latch's metrics:\n%s", code, body)
	}
	code, body := get(t, n, "/v1/status")
	var st struct {
		Mode string `json:"mode"`
		Node struct {
			LastToken uint64 `json:"last_token"`
		} `json:"node"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Mode != "single" || st.Node.LastToken != tok {
		t.Fatalf("/v1/status %d %s, want mode single and last token %d", code, body, tok)
	}
	if names := n.Hosts().Names(); len(names) != 1 || names[0] != "proxy.example" {
		t.Fatalf("Hosts %v, want proxy.example", names)
	}
	if n.Ready() != nil || n.Node().Stats().Keys != 1 {
		t.Fatalf("Ready %v, stats %+v: want ready with one key", n.Ready(), n.Node().Stats())
	}

	stop(t, n)
	c.ExpectClosed(t)
	if nc, err := net.Dial("tcp", n.Addr().String()); err == nil {
		nc.Close()
		t.Fatal("the client port still accepts after Stop")
	}
	if nc, err := net.Dial("tcp", n.HTTPAddr().String()); err == nil {
		nc.Close()
		t.Fatal("the HTTP port still accepts after Stop")
	}
	if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("Ready after Stop: %v, want shutting down", err)
	}
}

// Stop drains before it closes: a waiter is answered E unavailable on its connection, which
// is still read (a ping is answered), and readiness says the node is shutting down, before
// the sessions close and Stop returns.
func TestStopDrainsBeforeClosing(t *testing.T) {
	n := start(t)
	holder, waiter := dial(t, n), dial(t, n)
	holder.Grant(t, 1, 0, 60, "k")
	waiter.Send(t, wiretest.Acquire(7, 60, 60, "k"))
	for end := time.Now().Add(10 * time.Second); n.Node().Stats().Waiters != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the waiter never queued: %+v", n.Node().Stats())
		}
	}

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		stopped <- n.Stop(ctx)
	}()
	waiter.ExpectError(t, 7, wire.ReasonUnavailable)
	if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("Ready while draining: %v, want shutting down", err)
	}
	waiter.ExpectClosed(t)
	holder.ExpectClosed(t)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case err := <-n.Failed():
		if err == nil {
			t.Fatal("a serving loop returned nil")
		}
	default:
		t.Fatal("Stop returned before the serving loops did")
	}
}

// An address that cannot be listened on fails Start, naming the flag, and leaves nothing
// running (goleak checks the node's loop and listeners are gone).
func TestStartFailsOnABusyAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct{ listen, http, flag string }{
		{busy.Addr().String(), "127.0.0.1:0", "--listen"},
		{"127.0.0.1:0", busy.Addr().String(), "--http"},
	} {
		cfg := single.DefaultConfig()
		cfg.Listen, cfg.HTTP = tc.listen, tc.http
		if n, err := single.Start(cfg); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			if n != nil {
				stop(t, n)
			}
			t.Fatalf("Start with a busy %s: %v, want an error naming it", tc.flag, err)
		}
	}
}

// Validate refuses what cannot work before anything is opened: an open --listen that no
// secret protects (unless Insecure), and a missing address.
func TestValidate(t *testing.T) {
	cfg := single.DefaultConfig()
	cfg.Listen = "0.0.0.0:7400"
	if err := cfg.Validate(); err == nil {
		t.Fatal("an open --listen without a secret was accepted")
	}
	cfg.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("--insecure: %v", err)
	}
	cfg.HTTPHosts = []string{"not a name!"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--http-allowed-host") {
		t.Fatalf("a bad --http-allowed-host: %v", err)
	}
	cfg.HTTPHosts = []string{"proxy.example"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("--http-allowed-host proxy.example: %v", err)
	}
	cfg.HTTP = ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Fatalf("no --http: %v", err)
	}
	if _, err := single.Start(cfg); err == nil {
		t.Fatal("Start did not validate")
	}
	if err := single.DefaultConfig().Validate(); err != nil {
		t.Fatalf("the default config does not validate: %v", err)
	}
}
