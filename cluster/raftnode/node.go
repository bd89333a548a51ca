package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/latchd/latch/fsm"
)

// Node is one member of a latch raft cluster: raft, its stores, the FSM it replicates, the
// batching proposer and the leadership signals. Its methods are safe for concurrent use.
type Node struct {
	cfg     Config
	log     hclog.Logger
	raft    *raft.Raft
	fsm     *fsm.FSM
	store   *raftboltdb.BoltStore // term and vote
	wal     *wal.WAL              // the Raft log
	walMeta *metadb.BoltMetaDB    // the WAL's metadata; closed after it
	trans   raft.Transport        // the real transport, under filter
	disk    diskFull              // whether the data dir ran out of space (disk.go)
	stop    failStop              // stops the node when its disk fails (failstop.go)
	filter  *filter               // what raft runs on: drops RPCs from outside the configuration
	members members               // the configuration the filter and CheckPeer check against
	addr    string                // Advertise, resolved

	// Leadership (leader.go). leading is true from just before OnLeader until just
	// before OnFollower; leadMu orders its changes with the stop of the leader loop.
	notifyCh  chan bool
	leadMu    sync.Mutex
	leading   atomic.Bool
	leadStop  <-chan struct{} // the running leader loop's stop; guarded by leadMu
	cbMu      sync.Mutex      // serializes OnLeader and OnFollower (leader.go)
	restoreMu sync.Mutex      // one Restore at a time (backup.go)
	// applyMu is held by the proposer from its leadership check until raft has taken the
	// entry (Apply returned), so that Restore, once it has cleared leading and taken applyMu,
	// knows every entry it must wait for is ahead of its Barrier.
	applyMu sync.Mutex
	// confMu serializes this node's configuration changes, so that a check of the
	// configuration and the change that depends on it are not split by another change.
	confMu      sync.Mutex
	stopMonitor chan struct{}
	monitorDone chan struct{}
	watchDone   chan struct{} // closed when watchLeader returned (at once without OnLeaderChange)

	// Proposer (proposer.go) and the pipeline that answers its entries (pipeline.go).
	q           queue
	pipe        pipeline
	slots       chan struct{} // window of entries in flight: a send takes a slot
	stopPropose chan struct{}
	proposeDone chan struct{}
	raftDown    chan struct{} // closed once raft has shut down: no future is answered after it
	entries     atomic.Uint64 // entries proposed to raft
	commands    atomic.Uint64 // commands in them
	// proposed numbers the entries handed to raft.Apply (the proposer counts it up just
	// before each), answered the last of them the pipeline has answered: what is in
	// between is in flight. Leadership confirmations ride on them (confirm.go).
	proposed atomic.Uint64
	answered atomic.Uint64

	// Readiness (ready.go): the leader's commit index as last asked.
	ready readiness
	// Leadership confirmations (confirm.go).
	conf confirms

	// The promise (promise.go) and its writer goroutine (keepPromise).
	promise     *keeper
	promiseStop chan struct{}
	promiseDone chan struct{}

	closing      atomic.Bool
	shutdownOnce sync.Once
	shutdownDone chan struct{}
	shutdownErr  error
}

// Open opens (or creates) the node's stores in cfg.DataDir, bootstraps a new cluster if cfg
// asks for one and DataDir holds no raft state, and starts raft, the proposer and the
// leadership monitor. Bootstrap rules:
//
//   - DataDir holds raft state (log, votes or a snapshot): restart from it; Bootstrap and
//     InitialCluster are ignored.
//   - else Bootstrap: a one-node cluster of this node.
//   - else InitialCluster: a cluster of exactly those members (this node among them).
//   - else: start empty and wait for a leader to add this node (AddVoter or AddNonvoter).
//
// On error everything Open built is closed again.
func Open(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.Logger
	if base == nil {
		base = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: os.Stderr})
	}
	var cleanups []func()
	fail := func(err error) (*Node, error) {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		return nil, err
	}

	st, err := openStores(cfg.DataDir, base, false)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = st.close() })
	store, wlog, meta, snaps := st.bolt, st.wal, st.meta, st.snaps

	trans := cfg.Transport
	if trans == nil {
		nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  cfg.Stream,
			MaxPool: transportMaxPool,
			Timeout: transportTimeout,
			Logger:  base.Named("raft-net"),
		})
		trans = nt
		cleanups = append(cleanups, func() { _ = nt.Close() })
	}

	f, err := fsm.NewFSM(0) // the floor enters through the log, see Config.TokenFloor
	if err != nil {
		return fail(err)
	}
	n := &Node{
		cfg:          cfg,
		log:          base.Named("raftnode"),
		fsm:          f,
		store:        store,
		wal:          wlog,
		walMeta:      meta,
		trans:        trans,
		addr:         cfg.advertiseAddr(trans),
		notifyCh:     make(chan bool, notifyBuffer),
		stopMonitor:  make(chan struct{}),
		monitorDone:  make(chan struct{}),
		watchDone:    make(chan struct{}),
		slots:        make(chan struct{}, cfg.MaxInFlight),
		stopPropose:  make(chan struct{}),
		proposeDone:  make(chan struct{}),
		raftDown:     make(chan struct{}),
		shutdownDone: make(chan struct{}),
		promiseStop:  make(chan struct{}),
		promiseDone:  make(chan struct{}),
	}
	n.q.signal = make(chan struct{}, 1)
	n.pipe.kick = make(chan struct{}, 1)
	n.pipe.drained = make(chan struct{})
	f.OnApplied = n.applied // before raft starts: the FSM is raft's from then on
	n.conf.settled = make(chan struct{}, 1)
	n.ready.ask = cfg.LeaderCommit
	n.ready.ctx, n.ready.cancel = context.WithCancel(context.Background())
	n.members.log, n.members.self, n.members.vouch = n.log, cfg.ID, cfg.Vouch
	n.filter = newFilter(trans, &n.members, n.log)
	if n.addr != string(trans.LocalAddr()) {
		n.log.Debug("advertised address differs from the transport's local address; "+
			"followers learn the leader's address from the configuration by ID",
			"advertise", n.addr, "transport", trans.LocalAddr())
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	plog := newPeerLog(base.Named("raft")) // peer-down lines once per change, not per heartbeat
	plog.st.addrOf = func(id string) string {
		if set := n.members.set.Load(); set != nil {
			return (*set)[id]
		}
		return ""
	}
	rc.Logger = plog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.MaxAppendEntries = maxAppendEntries
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = n.notifyCh
	// A removed leader becomes a follower instead of shutting raft down behind the Node's
	// back: Shutdown stays the one owner of raft's lifecycle.
	rc.ShutdownOnRemove = false
	// BatchApplyCh stays false: a buffered applyCh orphans futures on shutdown, and the
	// proposer batches commands itself.
	if err := raft.ValidateConfig(rc); err != nil {
		return fail(fmt.Errorf("raftnode: raft configuration: %w", err))
	}

	existing, err := st.hasState()
	if err != nil {
		return fail(fmt.Errorf("raftnode: read raft state in %s: %w", cfg.DataDir, err))
	}
	start, err := st.check(n.log, false)
	if err != nil {
		return fail(err)
	}
	// From here raft writes through stores that keep the promise (promise.go), which is
	// written now, so that a directory from an older latch gets one at its first start.
	n.promise = newKeeper(cfg.DataDir, start.cur)
	if err := n.promise.flush(); err != nil {
		if diskFailed(err) {
			err = broken(cfg.DataDir, "write "+promiseFile, err)
		}
		return fail(err)
	}
	if err := recordFormat(cfg.DataDir, st.format, cfg.Version); err != nil {
		return fail(err)
	}
	n.stop = failStop{log: n.log, hook: cfg.FailStop}
	n.disk.log, n.disk.stop = n.log, &n.stop
	logs, err := raft.NewLogCache(logCacheSize, promisedLog{LogStore: wlog, k: n.promise, disk: &n.disk})
	if err != nil {
		return fail(fmt.Errorf("raftnode: log cache: %w", err))
	}
	stable := promisedStable{StableStore: store, k: n.promise, log: n.log, disk: &n.disk}
	snapStore := promisedSnapshots{SnapshotStore: snaps, k: n.promise, log: n.log, disk: &n.disk, dir: cfg.DataDir, mu: new(sync.Mutex)}
	var servers []raft.Server
	switch {
	case existing:
		n.log.Info("restarting from existing raft state", "dir", cfg.DataDir, "last_index", start.cur.LastIndex, "term", start.cur.Term)
	case cfg.Bootstrap:
		servers = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(n.addr)}}
	case len(cfg.InitialCluster) > 0:
		for _, p := range cfg.InitialCluster {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
	default:
		n.log.Info("no raft state and nothing to bootstrap: waiting to be added to a cluster, or to catch up with it "+
			"before taking part in elections", "id", cfg.ID, "addr", n.addr)
		n.filter.amnesiac.Store(true) // amnesia.go: perhaps a member whose disk was lost
	}
	if servers != nil {
		n.log.Info("bootstrapping a new cluster", "servers", len(servers))
		if err := raft.BootstrapCluster(rc, logs, stable, snapStore, n.filter.transport(), raft.Configuration{Servers: servers}); err != nil {
			return fail(fmt.Errorf("raftnode: bootstrap: %w", err))
		}
	}

	r, err := raft.NewRaft(rc, f, logs, stable, snapStore, n.filter.transport())
	if err != nil {
		return fail(fmt.Errorf("raftnode: start raft: %w", err))
	}
	n.raft = r
	n.members.start(r, n.stopMonitor)
	n.filter.start()

	if n.filter.amnesiac.Load() {
		go n.awaitCaughtUp(n.stopMonitor)
	}
	go n.keepPromise()
	go n.monitor()
	go n.watchPeers(plog.st, n.stopMonitor)
	if cfg.OnLeaderChange != nil {
		go n.watchLeader(n.stopMonitor, n.watchDone)
	} else {
		close(n.watchDone)
	}
	go n.propose()
	go n.settle()
	return n, nil
}

// FSM returns the replicated state machine. Read it only through its own methods (Read,
// Holder, LastToken, ...), which take its lock; never change it.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// ID returns this node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// Addr returns the address this node advertises.
func (n *Node) Addr() string { return n.addr }

// Shutdown stops the node. If it leads, it first transfers leadership to another voter
// (bounded by ApplyTimeout and ctx), so that the cluster elects a successor without waiting
// for an election timeout. Then it stops accepting commands, shuts raft down (which closes
// the transport), answers every outstanding command (Unavailable or Indeterminate),
// calls OnFollower if OnLeader was called, and closes the stores.
//
// Every wait is bounded by ctx. If ctx ends first Shutdown returns its error and leaves the
// stores open if raft has not stopped (closing them under raft would corrupt nothing but
// fail raft's writes); the process should exit. Shutdown is idempotent: later calls wait for
// the first (bounded by their own ctx) and return its result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() {
		go func() {
			n.shutdownErr = n.shutdown(ctx)
			close(n.shutdownDone)
		}()
	})
	select {
	case <-n.shutdownDone:
		return n.shutdownErr
	case <-ctx.Done():
		return fmt.Errorf("raftnode: shutdown: %w", ctx.Err())
	}
}

func (n *Node) shutdown(ctx context.Context) error {
	n.closing.Store(true) // Submit and the proposer reject from here on
	n.ready.cancel()
	var errs []error

	if n.raft.State() == raft.Leader && n.otherVoters() > 0 {
		if err := n.transferLeadership(ctx.Done()); err != nil {
			n.log.Warn("leadership transfer before shutdown failed; the cluster will elect a leader after its timeout", "error", err)
		}
	}

	raftStopped := true
	if err := n.wait(n.raft.Shutdown(), ctx.Done(), n.cfg.ApplyTimeout); err != nil {
		raftStopped = false
		errs = append(errs, fmt.Errorf("raftnode: raft shutdown: %w", err))
	}
	close(n.raftDown)
	n.filter.stop() // raft closed it if it stopped; if not, it gets no more RPCs
	// raft closes the transport's listener but not its pooled outgoing connections, which
	// would keep the peers' handler goroutines (and sockets) alive until this process exits.
	if cs, ok := n.trans.(interface{ CloseStreams() }); ok && raftStopped {
		cs.CloseStreams()
	}

	close(n.stopPropose)
	close(n.stopMonitor)
	for _, ch := range []chan struct{}{n.proposeDone, n.pipe.drained, n.monitorDone, n.watchDone} {
		select {
		case <-ch:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("raftnode: shutdown: %w", ctx.Err()))
			return errors.Join(errs...)
		}
	}

	close(n.promiseStop)
	<-n.promiseDone
	if raftStopped {
		// A clean stop promises everything the log holds.
		if err := n.promise.flush(); err != nil {
			errs = append(errs, err)
		}
		if err := n.wal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close the raft log: %w", err))
		}
		if err := n.walMeta.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close the raft log's metadata: %w", err))
		}
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close raft.db: %w", err))
		}
	}
	return errors.Join(errs...)
}

// wait waits for f until timeout, or until stop closes (nil: never). It
// never blocks on f itself, since raft futures can stay unanswered forever after a
// shutdown: a helper goroutine does, and is left behind if f never resolves.
func (n *Node) wait(f raft.Future, stop <-chan struct{}, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return ErrTimeout
	case <-stop:
		return errStopped
	}
}

// keepPromise writes the promise every promiseInterval when the log's end moved (or an
// earlier write failed), until shutdown. A failed write is logged, once a minute at most
// while it keeps failing; raft's own writes fail on such a disk too.
func (n *Node) keepPromise() {
	defer close(n.promiseDone)
	t := time.NewTicker(promiseInterval)
	defer t.Stop()
	var lastLogged time.Time
	for {
		select {
		case <-n.promiseStop:
			return
		case <-t.C:
			err := n.promise.flush()
			n.stop.check("write "+promiseFile, err)
			if err != nil && time.Since(lastLogged) >= time.Minute {
				n.log.Error("cannot write the promise; a damaged log may go unnoticed at the next start", "error", err)
				lastLogged = time.Now()
			}
		}
	}
}
