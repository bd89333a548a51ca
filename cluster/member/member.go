package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// Member is a running cluster-mode member: the lock node, its raft node, the peer port,
// the forwarding link to the leader and the client-protocol server. Serve client
// connections with Server().Serve; Stop ends it all.
type Member struct {
	cfg  Config
	log  hclog.Logger
	node *cluster.Node
	srv  *server.Server
	mux  *peer.Mux
	link *forward.Link
	feat *features // the cluster's feature switch (features.go)
	// stopRemember ends the watch that keeps the switched-on features in the data dir
	// (remember.go).
	stopRemember context.CancelFunc
	adapter      *raftAdapter
	rp           atomic.Pointer[raftnode.Node] // the raft node: nil until raft is open (Start opens it)
	id, adv      string
	stopJoin     context.CancelFunc
	serving      *serving // the listeners of Serve (serve.go); nil before
}

// Start starts a member: it opens the peer port, decides whether to bootstrap (asking the
// other initial members; ctx bounds that wait), opens raft and starts forwarding and the
// join loop. The node's Run loop runs from here on; the client listener is the caller's.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, log: cfg.logger(), id: cfg.Raft.ID, adv: cfg.advertise()}
	dir := filepath.Clean(cfg.Raft.DataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	hasState, err := raftnode.HasState(dir)
	if err != nil {
		return nil, err
	}
	if m.cfg.Node.Metrics == nil {
		m.cfg.Node.Metrics = cluster.NewMetrics()
	}
	rem, err := loadRemembered(dir, m.log.Named("features"))
	if err != nil {
		return nil, err
	}
	adapter := &raftAdapter{r: &m.rp}
	m.adapter = adapter
	m.cfg.Node.Replicated = &cluster.Replicated{Propose: adapter, State: adapter, Confirm: adapter, Remembered: rem.get}
	if m.node, err = cluster.NewNode(m.cfg.Node); err != nil {
		return nil, err
	}
	stream, err := m.listen(hasState)
	if err != nil {
		return nil, err
	}
	bootstrap := false
	if !hasState && cfg.self() >= 0 {
		join := admin.NewRemote(cfg.Join, cfg.JoinTLS)
		bootstrap, err = awaitInitialMembers(ctx, m.log.Named("bootstrap"), m.mux, m.id, cfg, join)
		if err != nil {
			stream.Close()
			m.mux.Close()
			return nil, fmt.Errorf("deciding whether to bootstrap: %w", err)
		}
	}
	if err := m.forwarding(); err != nil {
		stream.Close()
		m.mux.Close()
		return nil, err
	}
	if err := m.openRaft(stream, dir, adapter, bootstrap, hasState); err != nil {
		m.link.Close()
		stream.Close()
		m.mux.Close()
		return nil, err
	}
	registerRaftMetrics(m.cfg.Node.Metrics.Registry, m.rp.Load())
	registerFeatureMetrics(m.cfg.Node.Metrics.Registry, m.feat)
	go m.serveForwarded(peer.ChannelForward, 0)
	go m.serveForwarded(peer.ChannelForwardLeases, wire.FlagLeases)
	go m.node.Run()
	rctx, stopRemember := context.WithCancel(context.Background())
	m.stopRemember = stopRemember
	go rem.watch(rctx, func() (f fsm.Features) {
		adapter.Read(func(t *fsm.Table) { f = t.Features() })
		return f
	})
	if cfg.Join != "" && !bootstrap {
		m.startJoin()
	}
	return m, nil
}

// listen opens the peer port and its Raft stream layer, admits Raft peers by the raft
// configuration and serves the admin channel.
func (m *Member) listen(hasState bool) (*peer.StreamLayer, error) {
	pcfg := m.cfg.Peer
	// Peer.Secrets are the peer secrets only: the client secret opens none of the peer port.
	pcfg.Logger, pcfg.ID, pcfg.Advertise = m.log.Named("peer"), m.id, m.adv
	mux, err := peer.Listen(m.cfg.Listen, pcfg)
	if err != nil {
		return nil, fmt.Errorf("--raft-addr: %w", err)
	}
	stream, err := peer.NewStreamLayer(mux, advertised(m.adv))
	if err != nil {
		mux.Close()
		return nil, fmt.Errorf("--advertise: %w", err)
	}
	m.mux = mux
	m.feat = newFeatures(m.log.Named("features"), pcfg, m.id, &m.rp, m.cfg.HoldLeases)
	if m.cfg.HoldLeases {
		_ = mux.Listener(peer.ChannelForwardLeases).Close() // dials of it are refused from now on
	}
	stream.SetAdmission(raftAdmission(&m.rp, m.cfg.AcceptLegacyPeers))
	go admin.ServeChannel(mux.Listener(peer.ChannelAdmin), membership{rp: &m.rp, mux: mux, id: m.id, starting: !hasState, locks: m.node, feat: m.feat}, m.log.Named("admin"))
	return stream, nil
}

// openRaft opens the raft node, bootstrapping it with the initial cluster if so decided.
func (m *Member) openRaft(stream *peer.StreamLayer, dir string, adapter *raftAdapter, bootstrap, hasState bool) error {
	rcfg := m.cfg.Raft
	rcfg.DataDir, rcfg.Advertise, rcfg.Stream = dir, m.adv, stream
	rcfg.TokenFloor, rcfg.Logger = m.cfg.Node.TokenFloor, m.log
	rcfg.Version = m.cfg.Build.Version
	commits := m.cfg.Node.Metrics.RegisterCommitLatency()
	rcfg.CommitLatency = func(d time.Duration) { commits.Observe(d.Seconds()) }
	rcfg.InitialCluster = nil
	if bootstrap {
		rcfg.InitialCluster = m.cfg.Raft.InitialCluster
	}
	if !hasState && !bootstrap && !rcfg.Bootstrap {
		voteQuarantine(m.log, rcfg.ElectionTimeout)
	}
	rcfg.Vouch, rcfg.LeaderCommit = vouch(m.mux), leaderCommit(m.mux)
	rcfg.OnLeader, rcfg.OnFollower, rcfg.OnLeaderChange = m.lead, m.follow, m.leaderAt
	r, err := raftnode.Open(rcfg)
	if err != nil {
		return err
	}
	adapter.fsm.Store(r.FSM())
	m.rp.Store(r)
	return nil
}

// forwarding builds the follower side (a link to the leader's forward channel, pointed at
// raft's leader by leaderAt) and the client-protocol server that routes through it; the
// leader side (serveForwarded) serves forwarded connections as sessions of that server. The
// link dials the forward channel of revision 2 and, when the leader's peer port refuses it
// (a latch without the revision), the latch/1 one: each connection speaks what it got.
func (m *Member) forwarding() error {
	fcfg := m.cfg.Forward
	fcfg.Dial = func(ctx context.Context, addr string) (net.Conn, uint8, error) {
		nc, ch, err := m.mux.DialFallback(ctx, addr, peer.ChannelForwardLeases, peer.ChannelForward)
		if ch == peer.ChannelForwardLeases {
			return nc, wire.FlagLeases, err
		}
		return nc, 0, err
	}
	fcfg.Now, fcfg.Logger = m.node.Now, m.log.Named("forward")
	fcfg.Origins = true // a leader that audits learns which client each request came from
	link, err := forward.NewLink(fcfg)
	if err != nil {
		return err
	}
	m.link = link
	registerForwardMetrics(m.cfg.Node.Metrics.Registry, link)
	scfg := m.cfg.Server
	scfg.Router = router{node: m.node, link: link}
	if m.srv, err = server.New(scfg, m.node); err != nil {
		link.Close()
		return err
	}
	return nil
}

// serveForwarded runs every connection of the peer port's forward channel ch as a session of
// the server that speaks the protocol revisions revs (no handshake: the peer port
// authenticated it, and the channel says the revision), naming the follower by the node ID
// its peer handshake stated (the audit trail's via). Every build that applies the
// cluster's feature switch serves the revised channel, always: that is how the leader sees
// that it supports revision 2 (features.go).
func (m *Member) serveForwarded(ch byte, revs uint8) {
	ln := m.mux.Listener(ch)
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		if m.srv.ServePeer(nc, revs, peer.IdentityOf(nc).ID) != nil {
			return
		}
	}
}

// startJoin starts the join loop. A node signs its own join with its peer secret (or proves
// it with its certificate over an https:// --join): the cluster lets a peer add or promote
// only itself.
func (m *Member) startJoin() {
	ctx, cancel := context.WithCancel(context.Background())
	m.stopJoin = cancel
	var secret []byte
	if len(m.cfg.Peer.Secrets) > 0 {
		secret = m.cfg.Peer.Secrets[0]
	}
	target := admin.NewRemote(m.cfg.Join, m.cfg.JoinTLS)
	go join(ctx, m.log.Named("join"), m.rp.Load(), m.cfg.Join, target, m.id, m.adv, secret)
}

// Ready is nil when this member can serve clients: raft is ready and, on a follower, the
// forwarding link knows the leader.
func (m *Member) Ready() error {
	if err := m.rp.Load().Ready(); err != nil {
		return err
	}
	if !m.node.Leading() && m.link.Stats().Leader == "" {
		return errors.New("forwarding does not know the leader yet")
	}
	return nil
}

// Node is the member's lock node.
func (m *Member) Node() *cluster.Node { return m.node }

// Server is the client-protocol server: serve the client listener with it.
func (m *Member) Server() *server.Server { return m.srv }

// Raft is the member's raft node.
func (m *Member) Raft() *raftnode.Node { return m.rp.Load() }

// ID is this member's --id.
func (m *Member) ID() string { return m.id }

// Metrics is the set the node, raft and forwarding report to.
func (m *Member) Metrics() *cluster.Metrics { return m.cfg.Node.Metrics }

// Admin is what a member answers on the admin HTTP API besides its own status: membership
// and backups (admin.Cluster) and the lock inspection and forced release of /v1/locks
// (admin.Locks). The leader answers; a follower forwards to it.
type Admin interface {
	admin.Cluster
	admin.Locks
}

// Admin is this member's side of the admin HTTP API (see type Admin): AdminOptions puts it
// in both admin.Options.Cluster and admin.Options.Locks.
func (m *Member) Admin() Admin {
	return membership{rp: &m.rp, mux: m.mux, id: m.id, forward: true, locks: m.node, feat: m.feat}
}

// Leases reports whether the cluster's feature switch for protocol revision 2 is on in this
// member's applied log (features.go).
func (m *Member) Leases() bool { return m.feat.leases() }

// AdminOptions are this member's admin options for HTTP (cmd adds Pprof): its status
// (mode, id, boot, node stats, raft status, the cluster's features switched on: "leases" for
// protocol revision 2, and the build: Config.Build), membership and backups, lock inspection, the
// verifier of calls made to this node and run (boot) with Config.Admin, and the names HTTP
// answers to (Config.hosts, checked by Validate).
func (m *Member) AdminOptions(boot string) admin.Options {
	hosts, _ := m.cfg.hosts()
	a := m.Admin()
	return admin.Options{
		Hosts: hosts,
		Status: func() any {
			return map[string]any{"mode": "cluster", "id": m.id, "boot": boot, "node": m.node.Stats(), "raft": m.rp.Load().Status(),
				"features": map[string]bool{"leases": m.feat.leases()}, "build": m.cfg.Build}
		},
		Cluster:  a,
		Locks:    a,
		Verifier: admin.NewVerifier(admin.Target{Node: m.id, Boot: boot}, m.cfg.Admin, nil),
	}
}

// Stop ends the member in order: the server drains (no new clients; waiters and new
// acquires are answered E unavailable; every connection is still read), leadership passes to
// another voter if this member leads, the sessions close (bounded by ctx), the node closes,
// the join loop and forwarding stop, raft shuts down, the peer port closes, and HTTP (if
// Serve opened it) shuts down. It returns the sessions' shutdown error; a raft shutdown error
// is logged.
func (m *Member) Stop(ctx context.Context) error {
	// Drain first and hand leadership on while every connection is still read: waiters
	// and new acquires are answered E unavailable, and followers' links move to the next
	// leader, before the sessions close. Nothing sent meanwhile is lost with a connection.
	m.srv.Drain()
	if err := m.rp.Load().StepDown(ctx); err != nil {
		m.log.Warn("leadership transfer before stopping failed; the cluster elects a leader after its timeout", "error", err)
	}
	serr := m.srv.Shutdown(ctx)
	m.node.Close()
	if m.stopJoin != nil {
		m.stopJoin()
	}
	m.feat.close()
	m.stopRemember()
	m.link.Close()
	if err := m.rp.Load().Shutdown(ctx); err != nil {
		m.log.Warn("raft shutdown", "error", err)
	}
	m.mux.Close()
	if m.serving != nil {
		m.serving.hs.Shutdown(ctx)
		m.serving.wg.Wait() // both listeners are closed: their Serve loops have returned
	}
	return serr
}
