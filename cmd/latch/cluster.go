package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// clusterFlags are the server flags that only cluster mode reads.
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "id", Usage: "this node's stable, unique `ID` (cluster mode), e.g. the pod name", EnvVars: env("ID")},
		&cli.StringFlag{Name: "data-dir", Usage: "`DIR` for the Raft log, votes and snapshots (cluster mode)", EnvVars: env("DATA_DIR")},
		&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7401", Usage: "peer `ADDR` to listen on: Raft and forwarding (cluster mode)", EnvVars: env("RAFT_ADDR")},
		&cli.StringFlag{Name: "advertise", Usage: "the peer `ADDR` other nodes dial; may be a DNS name (default: --raft-addr)", EnvVars: env("ADVERTISE")},
		&cli.BoolFlag{Name: "bootstrap", Usage: "start a new one-node cluster (ignored when --data-dir holds state)", EnvVars: env("BOOTSTRAP")},
		&cli.StringFlag{Name: "initial-cluster", Usage: "`ID=ADDR,...`: every initial node starts with the same list; safe to restart with it. " +
			"A listed node with an empty --data-dir bootstraps only once every other listed node answers that it is new too", EnvVars: env("INITIAL_CLUSTER")},
		&cli.StringFlag{Name: "join", Usage: "`ADDR` (--http of any member): ask the cluster to add this node (a nonvoter until it has caught up, then a voter); a member already just rejoins. " +
			"May be given with --initial-cluster: nodes not in the list join, listed ones use it if they find the cluster already exists", EnvVars: env("JOIN")},
		&cli.BoolFlag{Name: "accept-legacy-peers", Usage: "during a rolling upgrade from a latch version whose peers state no node identity in the peer handshake: " +
			"accept their Raft connections (each RPC is still checked against the configuration); remove once every node runs this version", EnvVars: env("ACCEPT_LEGACY_PEERS")},
	}
}

// parseInitialCluster reads "id=addr,id=addr".
func parseInitialCluster(s string) ([]raftnode.Peer, error) {
	if s == "" {
		return nil, nil
	}
	var peers []raftnode.Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--initial-cluster: %q is not ID=ADDR", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--initial-cluster: %s: %w", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("--initial-cluster: id %q appears twice", id)
		}
		seen[id] = true
		peers = append(peers, raftnode.Peer{ID: id, Addr: addr})
	}
	return peers, nil
}

// advertised is a peer address that may be a DNS name.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

// lateRaft adapts the raft node to the cluster node's Proposer and StateReader. The cluster
// node is built before raft (raft's leadership hooks call it), so the raft node and its FSM
// are bound once they exist; a Submit before that is answered "not applied".
type lateRaft struct {
	r       atomic.Pointer[raftnode.Node]
	fsm     atomic.Pointer[fsm.FSM]
	leading atomic.Bool // between OnLeader and OnFollower: sessions decide locally
}

var errNotStarted = errors.New("raft is not started yet")

// Submit implements cluster.Proposer: raftnode's outcome errors become the node's, with the
// cause kept.
func (l *lateRaft) Submit(cmd fsm.Command, done func(fsm.Result, error)) {
	r := l.r.Load()
	if r == nil {
		go done(fsm.Result{}, fmt.Errorf("%w: %w", cluster.ErrNotApplied, errNotStarted))
		return
	}
	r.Submit(cmd, func(res fsm.Result, err error) { done(res, mapRaftErr(err)) })
}

// SubmitGroup implements cluster.GroupProposer: the commands share one log entry.
func (l *lateRaft) SubmitGroup(ps []cluster.Proposal) {
	r := l.r.Load()
	if r == nil {
		for _, p := range ps {
			l.Submit(p.Cmd, p.Done)
		}
		return
	}
	rps := make([]raftnode.Proposal, len(ps))
	for i, p := range ps {
		done := p.Done
		rps[i] = raftnode.Proposal{Cmd: p.Cmd, Done: func(res fsm.Result, err error) { done(res, mapRaftErr(err)) }}
	}
	r.SubmitGroup(rps...)
}

// mapRaftErr turns raftnode's outcome errors into the node's, keeping the cause.
func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raftnode.ErrNotApplied):
		return fmt.Errorf("%w: %w", cluster.ErrNotApplied, err)
	}
	return fmt.Errorf("%w: %w", cluster.ErrMaybeApplied, err)
}

// Read implements cluster.StateReader.
func (l *lateRaft) Read(fn func(*fsm.Table)) {
	if f := l.fsm.Load(); f != nil {
		f.Read(fn)
	}
}

// clusterParts is what cluster mode starts besides the client listener.
type clusterParts struct {
	mux      *peer.Mux
	raft     *raftnode.Node
	rp       *atomic.Pointer[raftnode.Node] // raft, for membership
	id       string
	adv      string
	stopJoin context.CancelFunc
	late     *lateRaft
	link     *forward.Link
	done     chan struct{} // closed by stop: ends the leader watch
}

// router sends a follower's acquires and releases to the leader (server.Router).
type router struct {
	late *lateRaft
	link *forward.Link
}

func (r router) Local() bool { return r.late.leading.Load() }

func (r router) Forward(req *wire.Request, readAt time.Time, out cluster.Replier) {
	r.link.Forward(req, readAt, out)
}

// forwarding starts the follower side (a link to the leader's forward channel, kept pointed
// at raft's current leader) and the leader side (forwarded connections served as sessions).
func (p *clusterParts) forwarding(log hclog.Logger, node *cluster.Node) (server.Router, error) {
	fcfg := forward.DefaultConfig()
	fcfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		return p.mux.Dial(ctx, addr, peer.ChannelForward)
	}
	fcfg.Now, fcfg.Logger = node.Now, log.Named("forward")
	link, err := forward.NewLink(fcfg)
	if err != nil {
		return nil, err
	}
	p.link = link
	go func() {
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		last := "\x00"
		for {
			_, addr := p.raft.Leader()
			if addr != last {
				link.SetLeader(addr)
				last = addr
			}
			select {
			case <-p.done:
				return
			case <-t.C:
			}
		}
	}()
	return router{late: p.late, link: link}, nil
}

// ready is nil when this node can serve clients: raft is ready and, on a follower, the
// forwarding link points at the leader (it learns it within one leaderPoll of raft).
func (p *clusterParts) ready() error {
	if err := p.raft.Ready(); err != nil {
		return err
	}
	if !p.late.leading.Load() && p.link != nil && p.link.Stats().Leader == "" {
		return errors.New("forwarding does not know the leader yet")
	}
	return nil
}

// leaderPoll is how often a node looks whether raft's leader changed, for forwarding.
const leaderPoll = 50 * time.Millisecond

// serveForwarded runs every connection of the peer port's forward channel as a session of
// srv (no handshake: the peer port authenticated it).
func (p *clusterParts) serveForwarded(srv *server.Server) {
	ln := p.mux.Listener(peer.ChannelForward)
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		if srv.ServePeer(nc) != nil {
			return
		}
	}
}

// startCluster opens the peer port and the raft node behind a cluster-mode node.
func startCluster(c *cli.Context, log hclog.Logger, cred credentials, tlsCfg serverTLS, node *cluster.Node, late *lateRaft, floor uint64) (*clusterParts, error) {
	id, dir := c.String("id"), c.String("data-dir")
	if id == "" || dir == "" {
		return nil, errors.New("cluster mode needs --id and --data-dir")
	}
	initial, err := parseInitialCluster(c.String("initial-cluster"))
	if err != nil {
		return nil, err
	}
	joinAddr := c.String("join")
	if c.Bool("bootstrap") && (len(initial) > 0 || joinAddr != "") {
		return nil, errors.New("--bootstrap excludes --initial-cluster and --join: use --initial-cluster on every initial node, --join on nodes added later")
	}
	self := slices.IndexFunc(initial, func(p raftnode.Peer) bool { return p.ID == id })
	if len(initial) > 0 && self < 0 && joinAddr == "" {
		return nil, fmt.Errorf("--id %q is not in --initial-cluster: list it there, or give --join ADDR (any member's --http) so the cluster adds it", id)
	}
	if err := server.CheckListen(c.String("raft-addr"), len(cred.peer) > 0 || tlsCfg.peer != nil, c.Bool("insecure")); errors.Is(err, server.ErrInsecureListen) {
		return nil, fmt.Errorf("--raft-addr %s: refusing a non-loopback peer port that nothing authenticates: anyone who can reach it "+
			"could speak Raft to this node; pass --peer-secret-file FILE or mutual TLS between peers (--tls-cert, --tls-key, --tls-ca), "+
			"or --insecure if the network is trusted", c.String("raft-addr"))
	} else if err != nil {
		return nil, fmt.Errorf("--raft-addr: %w", err)
	}
	if joinAddr != "" && len(cred.peer) == 0 && tlsCfg.peer != nil && !strings.HasPrefix(joinAddr, "https://") {
		return nil, fmt.Errorf("--join %s: a node proves its own join with its first --peer-secret-file line, or with its certificate "+
			"over an https:// --join (the cluster's --http-tls): give --peer-secret-file, or join through https://", joinAddr)
	}
	adv := c.String("advertise")
	switch {
	case self >= 0 && adv == "":
		adv = initial[self].Addr
	case self >= 0 && adv != initial[self].Addr:
		return nil, fmt.Errorf("--initial-cluster gives %q the address %q but --advertise is %q: use the same address in both", id, initial[self].Addr, adv)
	case adv == "":
		adv = c.String("raft-addr")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	hasState, err := raftnode.HasState(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	pcfg := peer.DefaultConfig()
	// The peer port takes the peer secrets only: the client secret opens none of it.
	pcfg.Secrets, pcfg.Logger = cred.peer, log.Named("peer")
	pcfg.TLS, pcfg.ClientTLS = tlsCfg.peer, tlsCfg.dial
	pcfg.ID, pcfg.Advertise = id, adv
	mux, err := peer.Listen(c.String("raft-addr"), pcfg)
	if err != nil {
		return nil, fmt.Errorf("--raft-addr: %w", err)
	}
	stream, err := peer.NewStreamLayer(mux, advertised(adv))
	if err != nil {
		mux.Close()
		return nil, fmt.Errorf("--advertise: %w", err)
	}
	rp := &atomic.Pointer[raftnode.Node]{}
	stream.SetAdmission(raftAdmission(rp, c.Bool("accept-legacy-peers")))
	go admin.ServeChannel(mux.Listener(peer.ChannelAdmin), membership{rp: rp, mux: mux, id: id, starting: !hasState}, log.Named("admin"))

	bootstrap := false
	if !hasState && self >= 0 {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		bootstrap, err = awaitInitialMembers(ctx, log.Named("bootstrap"), mux, id, c.String("http"), tlsCfg.http, joinAddr, newAdminTarget(joinAddr, tlsCfg.admin), initial)
		stop()
		if err != nil {
			stream.Close()
			mux.Close()
			return nil, fmt.Errorf("deciding whether to bootstrap: %w", err)
		}
	}

	rcfg := raftnode.DefaultConfig()
	rcfg.ID, rcfg.DataDir, rcfg.Advertise, rcfg.Stream = id, filepath.Clean(dir), adv, stream
	rcfg.Bootstrap, rcfg.TokenFloor = c.Bool("bootstrap"), floor
	if bootstrap {
		rcfg.InitialCluster = initial
	}
	rcfg.Logger = log
	if !hasState && !bootstrap && !rcfg.Bootstrap {
		voteQuarantine(log, rcfg.ElectionTimeout)
	}
	rcfg.Vouch = vouch(mux)
	rcfg.OnLeader = func(f *fsm.FSM) {
		late.fsm.Store(f)
		node.Lead()
		late.leading.Store(true)
	}
	rcfg.OnFollower = func() {
		late.leading.Store(false)
		node.Follow()
	}
	r, err := raftnode.Open(rcfg)
	if err != nil {
		stream.Close()
		mux.Close()
		return nil, err
	}
	rp.Store(r)
	late.r.Store(r)
	late.fsm.Store(r.FSM())
	parts := &clusterParts{mux: mux, raft: r, rp: rp, id: id, adv: adv, late: late, done: make(chan struct{})}
	if joinAddr != "" && !bootstrap {
		ctx, cancel := context.WithCancel(context.Background())
		parts.stopJoin = cancel
		// A node signs its own join with its peer secret (or proves it with its certificate
		// over an https:// --join): the cluster lets a peer add or promote only itself.
		var secret []byte
		if len(cred.peer) > 0 {
			secret = cred.peer[0]
		}
		go join(ctx, log.Named("join"), r, joinAddr, newAdminTarget(joinAddr, tlsCfg.admin), id, adv, secret)
	}
	return parts, nil
}

// raftAdmission admits to the Raft channel the peers that state the identity of a voter or
// nonvoter of this node's configuration (any peer while it has none: it waits to be added),
// and, with legacy, peers of an older latch that state none.
func raftAdmission(rp *atomic.Pointer[raftnode.Node], legacy bool) peer.Admission {
	return peer.Admission{
		Legacy: legacy,
		Check: func(id peer.Identity) error {
			r := rp.Load()
			if r == nil {
				return peer.ErrNotReady
			}
			return r.CheckPeer(id.ID, id.Addr)
		},
	}
}

// vouch asks the given members, one after another over the admin channel, whether their
// Raft configuration has id as a voter or nonvoter, and returns the address the first that
// does has for it (raftnode.Config.Vouch). A member answers for itself only: an answer from
// a node with another ID at that address is ignored.
func vouch(mux *peer.Mux) func(ctx context.Context, id string, members []raftnode.Peer) (string, bool) {
	return func(ctx context.Context, id string, members []raftnode.Peer) (string, bool) {
		for _, m := range members {
			st, err := probe(ctx, mux, m.Addr)
			if err != nil || st.ID != m.ID {
				continue
			}
			for _, s := range st.Servers {
				if s.ID == id && (s.Suffrage == "voter" || s.Suffrage == "nonvoter") {
					return s.Addr, true
				}
			}
		}
		return "", false
	}
}

// voteQuarantine keeps a node without raft state out of elections for a while before raft
// starts. Such a node, when it does not found a cluster, may be a member whose disk was lost:
// it has forgotten the vote it may have cast in the current term, and voting again in that
// term could let two candidates win it. A candidate's election lasts at most twice the
// election timeout, so once that has passed since this process started (which was after any
// vote it lost), every vote it casts is in a later term.
func voteQuarantine(log hclog.Logger, electionTimeout time.Duration) {
	wait := 2*electionTimeout + time.Second
	log.Info("no raft state: waiting before taking part in elections, so that a vote cast before the data was lost cannot be cast twice", "wait", wait)
	time.Sleep(wait)
}

// admin is the HTTP side of membership and backups: it forwards to the leader.
func (p *clusterParts) admin() membership {
	return membership{rp: p.rp, mux: p.mux, id: p.id, forward: true}
}

// stop transfers leadership if this node leads, then closes raft and the peer port.
func (p *clusterParts) stop(ctx context.Context) error {
	if p.stopJoin != nil {
		p.stopJoin()
	}
	close(p.done)
	if p.link != nil {
		p.link.Close()
	}
	err := p.raft.Shutdown(ctx)
	p.mux.Close()
	return err
}

// membership implements admin.Cluster on this node: the leader changes the configuration,
// takes backups and restores them itself; a follower forwards those to the leader over the
// peer port's admin channel.
type membership struct {
	rp      *atomic.Pointer[raftnode.Node] // nil until raft is open
	mux     *peer.Mux
	id      string
	forward bool // false on the admin channel's serving side: never forward twice
	// starting: this node had no raft state at startup, so until raft is open it answers
	// State as a new member (one that may bootstrap); a node with state answers nothing
	// until raft is open, so that no peer mistakes it for a new one.
	starting bool
}

var errStarting = errors.New("this node is starting: try again in a moment")

func (m membership) node() (*raftnode.Node, error) {
	if r := m.rp.Load(); r != nil {
		return r, nil
	}
	return nil, errStarting
}

func (m membership) Members() ([]admin.Member, error) {
	r, err := m.node()
	if err != nil {
		return nil, err
	}
	var out []admin.Member
	for _, s := range r.Servers() {
		out = append(out, admin.Member{ID: s.ID, Addr: s.Addr, Suffrage: s.Suffrage})
	}
	return out, nil
}

// AddMember adds id at addr. A voter is a nonvoter until it has caught up with the log
// (raftnode.AddVoterCaughtUp), so that a node that is not running yet, or is still
// installing the state, never counts for the quorum. The node that took the request first
// asks whoever answers at addr who it is, and refuses when that is another member.
func (m membership) AddMember(ctx context.Context, id, addr string, voter bool) error {
	r, err := m.node()
	if err != nil {
		return err
	}
	if m.forward {
		if _, err := m.lastIndexOf(id, addr)(ctx); errors.Is(err, admin.ErrOtherNode) {
			return err
		}
	}
	if voter {
		wctx, cancel := context.WithCancel(ctx)
		if dl, ok := ctx.Deadline(); ok {
			// Answer before a forwarding follower's own deadline, so that it relays why.
			wctx, cancel = context.WithDeadline(ctx, dl.Add(-catchUpMargin))
		}
		err = r.AddVoterCaughtUp(wctx, id, addr, catchUpPoll, m.lastIndexOf(id, addr))
		cancel()
	} else {
		err = r.AddNonvoter(id, addr)
	}
	return m.orForward(ctx, err, func(conn net.Conn) error {
		return admin.CallChannel(ctx, conn, admin.ChannelRequest{Op: "add", ID: id, Addr: addr, Voter: voter})
	})
}

// How often a new voter's progress is asked for, and how long before the call's deadline the
// wait for it gives up.
const (
	catchUpPoll   = 200 * time.Millisecond
	catchUpMargin = 5 * time.Second
)

// lastIndexOf asks the node at addr (its admin channel) for its last log index; it must be
// the member id.
func (m membership) lastIndexOf(id, addr string) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		st, err := probe(ctx, m.mux, addr)
		if err != nil {
			return 0, err
		}
		if st.ID != id {
			return 0, fmt.Errorf("%w: the node at %s is %q, not %q", admin.ErrOtherNode, addr, st.ID, id)
		}
		return st.LastIndex, nil
	}
}

func (m membership) RemoveMember(ctx context.Context, id string) error {
	r, err := m.node()
	if err != nil {
		return err
	}
	found := false
	for _, s := range r.Servers() {
		found = found || s.ID == id
	}
	if !found {
		return fmt.Errorf("%w: %q (see latch peers list)", admin.ErrNotFound, id)
	}
	return m.orForward(ctx, r.RemoveServer(id), func(conn net.Conn) error {
		return admin.CallChannel(ctx, conn, admin.ChannelRequest{Op: "remove", ID: id})
	})
}

func (m membership) Backup(ctx context.Context, w io.Writer) (fsm.SnapshotInfo, error) {
	r, err := m.node()
	if err != nil {
		return fsm.SnapshotInfo{}, err
	}
	// Backup refuses (not the leader) before it writes anything to w, so forwarding can
	// still write the leader's backup there.
	info, err := r.Backup(ctx, w)
	err = m.orForward(ctx, err, func(conn net.Conn) error {
		info, err = admin.CallBackup(ctx, conn, w)
		return err
	})
	return info, err
}

func (m membership) Restore(ctx context.Context, data []byte, floor uint64) (raftnode.Restored, error) {
	r, err := m.node()
	if err != nil {
		return raftnode.Restored{}, err
	}
	res, err := r.Restore(ctx, data, floor)
	err = m.orForward(ctx, err, func(conn net.Conn) error {
		res, err = admin.CallRestore(ctx, conn, data, floor)
		return err
	})
	return res, err
}

// CheckSelf asks the node at addr who it is, over the peer port: a call signed with a peer
// credential may add or promote only that node.
func (m membership) CheckSelf(ctx context.Context, id, addr string) error {
	st, err := probe(ctx, m.mux, addr)
	if err != nil {
		return fmt.Errorf("no answer from %s to check it is %q: %w", addr, id, err)
	}
	if st.ID != id {
		return fmt.Errorf("the node at %s is %q, not %q", addr, st.ID, id)
	}
	return nil
}

func (m membership) State() (admin.NodeState, error) {
	r := m.rp.Load()
	switch {
	case r != nil:
		return admin.NodeState{ID: m.id, LastIndex: r.Progress().LastLogIndex, Servers: r.Servers()}, nil
	case m.starting:
		return admin.NodeState{ID: m.id, Starting: true}, nil
	default:
		return admin.NodeState{}, errStarting
	}
}

// orForward runs call on a connection to the leader's admin channel when err says this
// node is not the leader; otherwise it returns err.
func (m membership) orForward(ctx context.Context, err error, call func(net.Conn) error) error {
	if err == nil || !m.forward || !errors.Is(err, raftnode.ErrNotLeader) {
		return err
	}
	r, _ := m.node()
	id, leader := r.Leader()
	if leader == "" || id == m.id {
		return fmt.Errorf("no leader to forward to yet: %w", err)
	}
	conn, derr := m.mux.Dial(ctx, leader, peer.ChannelAdmin)
	if derr != nil {
		return fmt.Errorf("forwarding to the leader %s: %w", leader, derr)
	}
	return call(conn)
}

// join asks the cluster behind httpAddr (any member's --http) to take this node in, until it
// is a voter or ctx ends. It joins as a nonvoter first and asks for a vote only once it has
// caught up (raftnode.Ready), so that a cluster growing under load never counts a voter that
// cannot yet acknowledge anything. A node that is already a voter (a restart, or a wiped
// member the configuration still lists) has nothing to do; a node whose own configuration
// leaves it out was removed, and does not add itself back.
func join(ctx context.Context, log hclog.Logger, r *raftnode.Node, httpAddr string, target adminTarget, id, advertise string, secret []byte) {
	var st joinState
	for wait := time.Second; ; {
		servers := r.Servers()
		own := ""
		if i := slices.IndexFunc(servers, func(s raftnode.Server) bool { return s.ID == id }); i >= 0 {
			own = servers[i].Suffrage
		}
		var err error
		pause := 200 * time.Millisecond
		listed := func() (string, error) {
			suffrage, ms, err := clusterListing(ctx, target, id)
			if err == nil && len(servers) == 0 {
				r.ExpectPeers(membersAsPeers(ms)) // before the leader first speaks to this node
			}
			return suffrage, err
		}
		switch st.next(own, len(servers) > 0, listed, r.Ready() == nil) {
		case joinJoined:
			log.Info("joined the cluster", "via", httpAddr, "id", id, "addr", advertise)
			return
		case joinMember:
			log.Info("already a member: not joining again", "join", httpAddr)
			return
		case joinRemoved:
			log.Warn("this node was removed from the cluster (its configuration and the cluster's list leave it out); "+
				"not joining again (wipe --data-dir to join afresh)", "join", httpAddr, "id", id)
			return
		case joinListed:
			log.Info("listed by the cluster; catching up", "via", httpAddr, "id", id)
		case joinAsk:
			if err = postPeer(ctx, target, admin.AddRequest{ID: id, Addr: advertise, Nonvoter: true}, secret); err == nil {
				st.asked = true
				log.Info("added to the cluster as a nonvoter; catching up before asking for a vote", "via", httpAddr, "id", id)
			}
		case joinCatchingUp:
			log.Info("catching up before asking for a vote", "reason", r.Ready())
		case joinPromote:
			if err = postPeer(ctx, target, admin.AddRequest{ID: id, Addr: advertise}, secret); err == nil {
				st.asked, st.promoted = true, time.Now()
			}
		case joinFailed:
			err = st.err
		}
		if err != nil {
			log.Warn("join failed; retrying", "via", httpAddr, "error", err, "in", wait)
			pause, wait = wait, min(2*wait, 10*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// joinState is what the join loop remembers between rounds; next decides each round.
type joinState struct {
	// seen: this node has found itself in its configuration. Missing from it after that
	// means it was removed. asked: its request to be added went through in this run; until
	// the entry that adds it arrives (the log, or a snapshot older than the add, may not have
	// it yet) it waits and never asks again, so a removal in between is not undone.
	seen, asked bool
	waiting     bool      // "catching up" was said once
	promoted    time.Time // when the last request for a vote went through
	err         error     // joinFailed: why
}

// The join loop's actions.
const (
	joinWait       = iota // nothing to do this round
	joinJoined            // a voter after asking: done
	joinMember            // a voter already: done
	joinRemoved           // removed from the cluster: stop, never add itself back
	joinListed            // the cluster lists it while its own configuration does not yet
	joinAsk               // ask to be added as a nonvoter
	joinCatchingUp        // a nonvoter not caught up yet (said once)
	joinPromote           // a nonvoter caught up: ask for a vote
	joinFailed            // asking the cluster failed: retry
)

// next decides one round. own is this node's suffrage in its own configuration ("" if it is
// not there), hasConfig whether that configuration lists anyone, listed asks the cluster
// (only when needed), ready whether this node has caught up.
func (st *joinState) next(own string, hasConfig bool, listed func() (string, error), ready bool) int {
	st.seen = st.seen || own != ""
	switch {
	case own == "voter" && st.asked:
		return joinJoined
	case own == "voter":
		return joinMember
	case own == "" && st.seen:
		return joinRemoved
	case own == "" && st.asked:
		return joinWait
	case own == "":
		// A new node, a removed one restarted, or one restarted while it caught up (its
		// configuration older than its addition): the cluster's own list tells them apart.
		l, err := listed()
		switch {
		case err != nil:
			st.err = err
			return joinFailed
		case l != "":
			st.asked = true
			return joinListed
		case hasConfig:
			return joinRemoved
		}
		return joinAsk
	case !ready:
		if st.waiting {
			return joinWait
		}
		st.waiting = true
		return joinCatchingUp
	case time.Since(st.promoted) < 5*time.Second:
		return joinWait // the vote was granted; the configuration that says so is on its way
	}
	return joinPromote
}

// clusterListing returns id's suffrage in the member list of the cluster behind a ("" if it
// is not listed), and the list.
func clusterListing(ctx context.Context, a adminTarget, id string) (string, []admin.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ms, err := listPeers(ctx, a)
	if err != nil {
		return "", nil, err
	}
	for _, m := range ms {
		if m.ID == id {
			return m.Suffrage, ms, nil
		}
	}
	return "", ms, nil
}

// membersAsPeers returns the voters and nonvoters of ms.
func membersAsPeers(ms []admin.Member) []raftnode.Peer {
	var out []raftnode.Peer
	for _, m := range ms {
		if m.Suffrage == "voter" || m.Suffrage == "nonvoter" {
			out = append(out, raftnode.Peer{ID: m.ID, Addr: m.Addr})
		}
	}
	return out
}

// postPeer sends a signed POST /v1/peers to the node at a.
func postPeer(ctx context.Context, a adminTarget, req admin.AddRequest, secret []byte) error {
	body, _ := json.Marshal(req)
	return callSigned(ctx, a, http.MethodPost, "/v1/peers", body, secret, nil)
}
