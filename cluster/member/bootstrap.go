package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/peer"
)

// Bootstrapping from --initial-cluster safely, when every pod gets the same arguments.
//
// A node listed in --initial-cluster whose data directory is empty may be starting a new
// cluster (all members are new), or may be a member whose disk was lost or wiped (the
// others carry on, or were recovered from one survivor). Bootstrapping in the second case
// would let wiped members form a rival cluster with no locks and a counter back at the
// floor. So before bootstrapping, the node asks every other listed member over the peer
// port (admin channel, authenticated) what it holds:
//
//   - all answer, and none has history (a log beyond a bootstrap configuration): bootstrap
//     with the list (every new member does the same, which raft allows);
//   - any has history: a cluster exists; start empty and let it take this node back (it is
//     in the configuration, or --join asks to be added);
//   - otherwise (some do not answer): wait and ask again. A new cluster needs every initial
//     member up once; from then on it needs only a majority.
//
// With --join it also asks the node behind that address (in Kubernetes, the client Service:
// ready pods only): a cluster recovered onto a node outside the list (latch-3 of five, say)
// is found there even when every listed member was wiped. At the very first start nobody
// answers there, and that must not hold the bootstrap back, so a --join that stays silent
// for joinSilence rounds in a row counts as "no cluster there"; an answer with no history
// counts at once.

// probeTimeout bounds one question to one member.
const probeTimeout = 3 * time.Second

// joinSilence is how many rounds in a row (one a second) --join must fail to answer before
// a node takes it that no cluster is there.
const joinSilence = 5

// awaitInitialMembers blocks until it can decide, and reports whether to bootstrap. While it
// waits it serves /healthz (alive) and /readyz (not ready, saying why) on httpAddr, so that
// a liveness probe does not restart a pod that waits for its peers.
func awaitInitialMembers(ctx context.Context, log hclog.Logger, mux *peer.Mux, self string, cfg Config, join admin.Remote) (bool, error) {
	joinAddr, initial := cfg.Join, cfg.Raft.InitialCluster
	var mu sync.Mutex
	waiting := "asking the other initial members what they hold"
	stopHTTP, err := serveWaiting(cfg.HTTP, cfg.HTTPTLS, cfg.HTTPServer, func() string { mu.Lock(); defer mu.Unlock(); return waiting })
	if err != nil {
		return false, err
	}
	defer stopHTTP()

	joinSilent := 0
	for attempt := 0; ; attempt++ {
		var missing, history []string
		var wg sync.WaitGroup
		var amu sync.Mutex
		for _, p := range initial {
			if p.ID == self {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := probe(ctx, mux, p.Addr)
				amu.Lock()
				defer amu.Unlock()
				switch {
				case err != nil:
					missing = append(missing, fmt.Sprintf("%s (%s: %v)", p.ID, p.Addr, err))
				case st.HasHistory():
					history = append(history, fmt.Sprintf("%s (last index %d)", p.ID, st.LastIndex))
				}
			}()
		}
		if joinAddr != "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := joinHistory(ctx, join)
				log.Debug("asked the cluster behind --join", "join", joinAddr, "last_index", n, "error", err)
				amu.Lock()
				defer amu.Unlock()
				switch {
				case err == nil && n > 1:
					history = append(history, fmt.Sprintf("the cluster behind --join %s (last index %d)", joinAddr, n))
				case err != nil:
					// Nothing there yet (a new cluster has no ready node), or a blip that must
					// not pass for "no cluster": only a silence that lasts counts.
					if joinSilent++; joinSilent < joinSilence {
						missing = append(missing, fmt.Sprintf("--join %s (%v)", joinAddr, err))
					}
				default:
					joinSilent = joinSilence
				}
			}()
		}
		wg.Wait()
		slices.Sort(missing)
		switch {
		case len(history) > 0:
			log.Info("a cluster already exists: not bootstrapping; starting empty to be taken back into it", "members_with_history", strings.Join(history, ", "))
			return false, nil
		case len(missing) == 0:
			log.Info("every initial member is new: bootstrapping the cluster", "members", len(initial))
			return true, nil
		}
		mu.Lock()
		waiting = "waiting for initial members to answer before bootstrapping: " + strings.Join(missing, "; ")
		mu.Unlock()
		if attempt%10 == 0 {
			log.Warn("waiting for every initial member before bootstrapping (a wiped member must not start a rival cluster)",
				"missing", strings.Join(missing, "; "), "attempt", attempt+1)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// joinHistory asks the node behind join (an --http address) for its last raft index.
func joinHistory(ctx context.Context, join admin.Remote) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var st struct {
		Raft *struct {
			LastLogIndex uint64 `json:"last_log_index"`
		} `json:"raft"`
	}
	if err := join.Call(ctx, http.MethodGet, "/v1/status", nil, nil, &st); err != nil {
		return 0, err
	}
	if st.Raft == nil {
		return 0, errors.New("not a cluster-mode node")
	}
	return st.Raft.LastLogIndex, nil
}

// probe asks the member at addr for its state.
func probe(ctx context.Context, mux *peer.Mux, addr string) (admin.NodeState, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := mux.Dial(ctx, addr, peer.ChannelAdmin)
	if err != nil {
		return admin.NodeState{}, err
	}
	return admin.CallState(ctx, conn)
}

// serveWaiting serves /healthz and /readyz on addr (over TLS with tc, if set) with the
// bounds of hc (the serving node's: an idle timeout, the connection cap) until the returned
// stop is called.
func serveWaiting(addr string, tc *tls.Config, hc admin.HTTPConfig, why func() string) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready: " + why() + "\n"))
	})
	hs, capped := admin.NewHTTPServer(mux, ln, hc)
	ln = capped // the cap counts TCP connections: TLS inside it
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		<-done
	}, nil
}
