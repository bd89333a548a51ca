package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/raftnode"
)

// tmember is one member of an in-process test cluster and its client listener.
type tmember struct {
	m       *Member
	clients string // the client listener's address
	stopped bool
}

// startCluster starts n members of one --initial-cluster in this process, each with a real
// peer port on loopback, a data directory in t.TempDir and a client listener; it returns
// once every member has started (each waits in Start until the others answer). tune, when
// given, changes each member's Config before it starts.
func startCluster(t testing.TB, n int, tune ...func(*Config)) []*tmember {
	t.Helper()
	secret := []byte("member-test-peer-secret-0123456789abcdef")
	var initial []raftnode.Peer
	for i := range n {
		initial = append(initial, raftnode.Peer{ID: fmt.Sprintf("m%d", i), Addr: clustertest.FreePorts(t, 1)[0]})
	}
	out := make([]*tmember, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		cfg := DefaultConfig()
		cfg.Raft.ID, cfg.Raft.DataDir, cfg.Raft.InitialCluster = initial[i].ID, filepath.Join(t.TempDir(), "data"), initial
		cfg.Listen, cfg.HTTP = initial[i].Addr, "127.0.0.1:0"
		cfg.Peer.Secrets = [][]byte{secret}
		cfg.Admin = admin.Credentials{AdminSecrets: [][]byte{[]byte("member-test-admin-secret-0123456789abcdef")}, PeerSecrets: cfg.Peer.Secrets}
		cfg.Logger = clustertest.Logger(t, initial[i].ID, hclog.Info)
		for _, f := range tune {
			f(&cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := Start(ctx, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				errs[i] = err
				return
			}
			go m.Server().Serve(ln)
			out[i] = &tmember{m: m, clients: ln.Addr().String()}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, tm := range out {
			if tm != nil && !tm.stopped {
				stop(t, tm)
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

func stop(t testing.TB, tm *tmember) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	if err := tm.m.Stop(ctx); err != nil {
		t.Errorf("stop %s: %v", tm.m.ID(), err)
	}
	tm.stopped = true
}

// leaderOf waits until exactly one running member leads and every running member is
// ready (a follower's link knows the leader), and returns the leader and a follower.
func leaderOf(t testing.TB, ms []*tmember) (leader, follower *tmember) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Bound, "one leader, every member ready", func() bool {
		leader, follower = nil, nil
		for _, tm := range ms {
			if tm.stopped {
				continue
			}
			if tm.m.Ready() != nil {
				return false
			}
			switch {
			case tm.m.Node().Leading() && leader != nil:
				return false
			case tm.m.Node().Leading():
				leader = tm
			default:
				follower = tm
			}
		}
		return leader != nil && follower != nil
	})
	return leader, follower
}

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Servers: []string{addr}, Secret: nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Three members composed by Start in one process: an acquire through a follower is
// forwarded to the leader and granted; when the leader stops, the survivors elect another,
// the follower's link follows it without polling, the lock granted before is still held,
// and the next token is above the first. Every member then stops.
func TestThreeMembersForwardAndFailOver(t *testing.T) {
	ms := startCluster(t, 3)
	leader, follower := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()

	// The admin options name this member and its run, and serve membership and locks.
	o := follower.m.AdminOptions("boot-f")
	if st, ok := o.Status().(map[string]any); !ok || st["mode"] != "cluster" || st["id"] != follower.m.ID() || st["boot"] != "boot-f" || st["raft"] == nil {
		t.Fatalf("follower status %#v, want mode cluster, its id, its boot and raft", o.Status())
	}
	if o.Cluster == nil || o.Locks == nil || o.Verifier == nil {
		t.Fatalf("follower admin options %+v, want membership, locks and a verifier", o)
	}

	cl := newClient(t, follower.clients)
	first, err := cl.Acquire(ctx, "held", 0, client.AcquireOptions{Lease: time.Hour})
	if err != nil {
		t.Fatalf("acquire through follower %s: %v", follower.m.ID(), err)
	}
	if follower.m.Node().Leading() || follower.m.link.Stats().Leader != leader.m.adv {
		t.Fatalf("follower %s leads or its link points at %q, not the leader %s at %s",
			follower.m.ID(), follower.m.link.Stats().Leader, leader.m.ID(), leader.m.adv)
	}
	if got := leader.m.Node().Stats().Keys; got != 1 {
		t.Fatalf("leader %s holds %d keys after the forwarded acquire, want 1", leader.m.ID(), got)
	}

	stop(t, leader)
	next, follower2 := leaderOf(t, ms)
	if next == leader {
		t.Fatalf("the stopped member %s still leads", leader.m.ID())
	}
	cl2 := newClient(t, follower2.clients)
	if _, err := cl2.Acquire(ctx, "held", 0, client.AcquireOptions{}); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("acquire of the held key through %s after the fail-over: %v, want ErrTimeout", follower2.m.ID(), err)
	}
	second, err := cl2.Acquire(ctx, "after", 0, client.AcquireOptions{})
	if err != nil {
		t.Fatalf("acquire through %s after the fail-over: %v", follower2.m.ID(), err)
	}
	if second.Token <= first.Token {
		t.Fatalf("token after the fail-over %d, not above %d", second.Token, first.Token)
	}
	for _, tm := range ms {
		if !tm.stopped {
			stop(t, tm)
		}
	}
}
