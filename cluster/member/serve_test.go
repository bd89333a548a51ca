package member

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
)

// Serve: a one-node cluster serves the protocol on its client listener and readiness and
// status on HTTP; Stop closes both, HTTP last, after which both serving loops have returned.
func TestServeAndStop(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Raft.ID, cfg.Raft.DataDir, cfg.Raft.Bootstrap = "s1", filepath.Join(t.TempDir(), "data"), true
	cfg.Listen, cfg.HTTP = clustertest.FreePorts(t, 1)[0], "127.0.0.1:0"
	cfg.Peer.Secrets = [][]byte{[]byte("member-test-peer-secret-0123456789abcdef")}
	cfg.Admin = admin.Credentials{AdminSecrets: [][]byte{[]byte("member-test-admin-secret-0123456789abcdef")}, PeerSecrets: cfg.Peer.Secrets}
	cfg.Logger = clustertest.Logger(t, "s1", hclog.Info)
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	m, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	tm := &tmember{m: m}
	t.Cleanup(func() {
		if !tm.stopped {
			stop(t, tm)
		}
	})
	if m.Addr() != nil || m.Failed() != nil {
		t.Fatal("addresses or a failure channel before Serve")
	}
	if err := m.Serve(ServeConfig{Listen: "127.0.0.1:0", Boot: "b1"}); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + m.HTTPAddr().String() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	clustertest.Eventually(t, clustertest.Bound, "/readyz 200 once it leads", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, body := get("/v1/status"); code != http.StatusOK || !strings.Contains(body, `"mode":"cluster"`) || !strings.Contains(body, `"boot":"b1"`) {
		t.Fatalf("/v1/status %d %s", code, body)
	}
	cl := newClient(t, m.Addr().String())
	if _, err := cl.Acquire(ctx, "k", 0, client.AcquireOptions{Lease: 30 * time.Second}); err != nil {
		t.Fatalf("Acquire on the served listener: %v", err)
	}
	cl.Close()

	stop(t, tm)
	for _, addr := range []net.Addr{m.Addr(), m.HTTPAddr()} {
		if nc, err := net.Dial("tcp", addr.String()); err == nil {
			nc.Close()
			t.Fatalf("%s still accepts after Stop", addr)
		}
	}
	select {
	case <-m.Failed():
	default:
		t.Fatal("Stop returned before the serving loops did")
	}
}

func TestParseInitialCluster(t *testing.T) {
	peers, err := ParseInitialCluster("a=127.0.0.1:1, b=h:2")
	if err != nil || len(peers) != 2 || peers[1].ID != "b" || peers[1].Addr != "h:2" {
		t.Fatalf("%+v, %v", peers, err)
	}
	for _, bad := range []string{"a", "a=", "=h:1", "a=h", "a=h:1,a=h:2"} {
		if _, err := ParseInitialCluster(bad); err == nil || !strings.Contains(err.Error(), "--initial-cluster") {
			t.Errorf("%q: %v, want an error naming --initial-cluster", bad, err)
		}
	}
	if peers, err := ParseInitialCluster(""); peers != nil || err != nil {
		t.Fatalf("empty: %+v, %v", peers, err)
	}
}
