package member

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
)

// vouch asks members over the real admin channel of their peer port: a one-node cluster
// vouches for its own member, not for a stranger, and an answer from a node that is not the
// member asked about counts for nothing.
func TestVouchAsksMembersOverTheAdminChannel(t *testing.T) {
	secret := [][]byte{[]byte("vouch-test-secret-0123456789abcdefghij")}
	cfg := peer.DefaultConfig()
	cfg.Secrets, cfg.Logger = secret, hclog.NewNullLogger()
	mux, err := peer.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := mux.Addr().String()
	stream, err := peer.NewStreamLayer(mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := raftnode.DefaultConfig()
	rcfg.ID, rcfg.DataDir, rcfg.Stream, rcfg.Bootstrap = "n1", filepath.Join(t.TempDir(), "data"), stream, true
	rcfg.Logger = hclog.NewNullLogger()
	r, err := raftnode.Open(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = r.Shutdown(ctx)
		_ = mux.Close()
	})
	rp := &atomic.Pointer[raftnode.Node]{}
	rp.Store(r)
	go admin.ServeChannel(mux.Listener(peer.ChannelAdmin), membership{rp: rp, mux: mux, id: "n1"}, hclog.NewNullLogger())

	asker, err := peer.Listen("127.0.0.1:0", cfg) // the lagging member's own peer port
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = asker.Close() })
	ask := vouch(asker)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	members := []raftnode.Peer{{ID: "n1", Addr: addr}}
	if got, ok := ask(ctx, "n1", members); !ok || got != addr {
		t.Fatalf("vouch for the member n1 = %q, %v; want %q, true", got, ok, addr)
	}
	if got, ok := ask(ctx, "evil", members); ok {
		t.Fatalf("vouch for a stranger = %q, true", got)
	}
	if got, ok := ask(ctx, "n1", []raftnode.Peer{{ID: "n2", Addr: addr}}); ok {
		t.Fatalf("an answer from n1 asked as n2 vouched %q", got)
	}
}
