package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/fsm"
)

// Limits and fixed settings of the raft wiring, in one place.
const (
	// logCacheSize is the number of recent entries raft.LogCache keeps in front of the bolt
	// store (replication and follower catch-up read them back).
	logCacheSize = 512
	// promiseInterval is how often the promise (promise.go) is written when the log's end
	// moved: the window of appends that damage could take unnoticed.
	promiseInterval = time.Second
	// snapshotsRetained is how many snapshots the file snapshot store keeps.
	snapshotsRetained = 2
	// maxAppendEntries caps raft's group commit, the entries per AppendEntries RPC and the
	// FSM batch (raft's own limit is 1024).
	maxAppendEntries = 256
	// boltOpenTimeout bounds the wait for raft.db's file lock, so that a second process on
	// the same data directory fails at once instead of waiting forever.
	boltOpenTimeout = time.Second
	// Transport built from Config.Stream: pooled connections per peer and I/O deadline.
	transportMaxPool = 3
	transportTimeout = 10 * time.Second
	// notifyBuffer is the buffer of raft's leadership NotifyCh. raft blocks on that send,
	// so one goroutine drains it at once; the buffer only absorbs scheduling delays.
	notifyBuffer = 16
	// establishAttempts is how many times a new leader tries its Barrier (and then the token
	// floor) before it gives leadership away.
	establishAttempts = 3
	// shutdownGrace is how long the settle goroutine still waits for a future after raft has shut
	// down: raft answers nothing after that, so the rest are answered Indeterminate.
	shutdownGrace = 100 * time.Millisecond
)

// Peer is one member of an initial cluster.
type Peer struct {
	ID   string // the member's Config.ID
	Addr string // the address the other members dial: the member's Config.Advertise
}

// Config configures a Node. Build one with DefaultConfig and set at least ID, DataDir and
// a Transport or Stream. Zero durations and sizes mean "the default".
type Config struct {
	// ID names this node in the cluster for its whole life: it must be stable across
	// restarts (a Kubernetes pod name, a host name) and unique in the cluster. Required.
	ID string

	// DataDir holds wal/ (the Raft log, raft-wal), raft.db (term and vote, raft-boltdb) and
	// snapshots/. One process per
	// directory: a second Open on the same directory fails with ErrDataDirInUse. Required.
	DataDir string

	// Version is the running latch's version (buildinfo), which Open records in DataDir's
	// format.json as the build that last wrote the directory (format.go). Empty: "unknown".
	Version string

	// Advertise is the address the other nodes dial to reach this one; it may be a DNS name
	// ("latch-0.latch.ns.svc:7000"). It is what Bootstrap writes into the configuration.
	// Empty means the transport's LocalAddr, or this node's entry in InitialCluster.
	Advertise string

	// Transport carries raft's RPCs. If nil, Stream must be set and Open builds a
	// raft.NetworkTransport on it (pool of 3 connections per peer, 10 s I/O deadline).
	// After a successful Open the Node owns the transport: Shutdown closes it (raft closes
	// any transport that implements raft.WithClose). If Open fails, a Transport passed here
	// is left open for the caller to close.
	Transport raft.Transport

	// Stream is the connection layer (for latch, the authenticated peer port) used to
	// build the transport when Transport is nil. Ignored when Transport is set.
	Stream raft.StreamLayer

	// Bootstrap makes a new one-node cluster of this node, if DataDir holds no raft state.
	// Grow it with AddVoter. Ignored when DataDir already holds state (a restart).
	// Mutually exclusive with InitialCluster.
	Bootstrap bool

	// InitialCluster bootstraps a new cluster of exactly these members, if DataDir holds no
	// raft state. Every initial member must be started with the same list, in the same
	// order; it must contain this node's ID. Restarting with it is safe: a node with state
	// ignores it. It does not change an existing cluster: use AddVoter and RemoveServer.
	InitialCluster []Peer

	// TokenFloor is the cluster's --token-floor: the first fencing token granted is above
	// it. It is never an FSM start value (a node that joins later replays the log); each
	// new leader proposes it as an fsm.CmdFloor entry after its Barrier whenever it is
	// above the FSM's last token, which never lowers the counter. At most fsm.MaxToken.
	TokenFloor uint64

	// Logger is the base logger: raft's logs go to Logger.Named("raft"), the transport's
	// to Named("raft-net"), the snapshot store's to Named("snapshots"), this package's to
	// Named("raftnode"). Nil means hclog at level Info on standard error.
	Logger hclog.Logger

	// CommitLatency, if set, is called with the time from raft.Apply of each log entry the
	// proposer packed to its result (committed and applied on this leader). It must not
	// block: it runs on the entry's waiting goroutine.
	CommitLatency func(time.Duration)

	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout are raft's timeouts (see
	// raft.Config). Zero means raft's defaults: 1 s, 1 s and 500 ms. Do not go below a few
	// hundred milliseconds in production: GC pauses and CPU throttling cause flapping.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration

	// ApplyTimeout bounds every wait on raft: the enqueue of an entry, and separately the
	// wait for its commit and result; every Barrier, membership change and leadership
	// transfer. A command whose entry gets no answer in time is answered Indeterminate
	// wrapping ErrTimeout. Default 10 s.
	ApplyTimeout time.Duration

	// MaxBatch is the most commands the proposer packs into one log entry. Default 256.
	MaxBatch int

	// MaxInFlight is the most entries proposed and not yet answered (the pipeline depth).
	// Default 16.
	MaxInFlight int

	// MaxQueue is the most commands waiting to be packed into an entry; a Submit beyond it
	// is answered Unavailable wrapping ErrQueueFull. Default 16384.
	MaxQueue int

	// SnapshotInterval, SnapshotThreshold and TrailingLogs drive raft's automatic snapshots:
	// every SnapshotInterval (randomised up to 2x) raft snapshots if SnapshotThreshold
	// entries were appended since the last one, then keeps TrailingLogs entries behind it.
	// Defaults 30 s, 4096 and 4096: an entry carries up to MaxBatch commands, so this keeps
	// raft.db and replay short while a follower can lag ~4096 entries without needing a
	// whole snapshot.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64

	// OnLeader, if set, is called once this node leads and has established it: raft's
	// Barrier committed (the FSM holds every entry acknowledged by any earlier leader) and
	// the token floor is applied. IsLeader and Submit work from just before the call. The
	// argument is the node's FSM, for rebuilding state from it (FSM.Read).
	//
	// OnFollower, if set, is called when a leadership that OnLeader reported ends (stepped
	// down, transferred, or Shutdown), exactly once per OnLeader call and never without one.
	// Submit rejects commands from just before the call.
	//
	// Both are called from the node's leader goroutine, one at a time and in order (OnLeader,
	// OnFollower, OnLeader, ...), never concurrently with each other. They must return
	// promptly: the next leadership is not established until OnFollower has returned.
	// The done callbacks of Submit run on another goroutine and are not ordered with them:
	// results of entries proposed in a leadership may arrive after its OnFollower.
	OnLeader   func(*fsm.FSM)
	OnFollower func()

	// OnLeaderChange, if set, is called with the leader this node knows of whenever that
	// changes: its ID and advertised address (as Leader returns them), or empty strings when
	// it knows none. A follower learns a new leader from its first heartbeat (raft's leader
	// observation); the leader itself is reported too, as soon as raft elects it (before
	// OnLeader, which waits for the leadership to be established). Calls come from one
	// goroutine, in order and never twice in a row with the same leader, from Open until
	// Shutdown; the first reports the leader known at Open (often none). It must return
	// promptly: raft's observations are read by the same goroutine.
	OnLeaderChange func(id, addr string)

	// Vouch, if set, asks other members about a Raft sender this node refuses: one that
	// names itself id but is not in this node's (non-empty) configuration. A member that
	// lagged behind a membership change does not know the nodes added since, and one of them
	// may lead by now: refused, it could never catch this member up. Vouch asks members (this
	// node's configuration, itself left out) whether their configuration has id, and returns
	// the address one of them has for it. A sender vouched for is admitted for a minute, and
	// asked about again before that runs out. Vouch runs on a goroutine of its own, one at a
	// time, at most every 100 ms and every 5 s per sender; it must return when ctx ends.
	// Nil: no member is asked, and such a member must be wiped and added again.
	Vouch func(ctx context.Context, id string, members []Peer) (addr string, ok bool)

	// FailStop is called, at most once and on the goroutine whose write failed, when the
	// data directory fails a write or an fsync with an I/O error (ErrDiskFailed wrapping it:
	// EIO, EROFS, or any failed fsync; a full disk is not one). After a failed fsync the
	// node's log and votes can no longer be trusted, so FailStop must end the process at
	// once, without another write (cmd/latch exits 74). It must not return; nil (and a
	// FailStop that returns) panics with the error. failstop.go says why.
	FailStop func(error)

	// LeaderCommit, if set, asks the leader (its ID and advertised address) for its commit
	// index (the leader answers with Node.LeaderCommit), for Ready on a follower: a follower
	// is ready once it has applied what the leader had committed when asked. It runs on a
	// goroutine of its own, one at a time, at most every 500 ms while Ready is called; it
	// must return when ctx ends. Nil: a follower compares with raft's own commit index,
	// which on a follower is not the leader's (ready.go), so a restarted follower may look
	// ready before it has caught up.
	LeaderCommit func(ctx context.Context, id, addr string) (uint64, error)
}

// DefaultConfig returns a Config with every default filled in; set ID, DataDir and a
// Transport or Stream, and Bootstrap or InitialCluster for a new cluster.
func DefaultConfig() Config {
	rc := raft.DefaultConfig()
	return Config{
		HeartbeatTimeout:   rc.HeartbeatTimeout,
		ElectionTimeout:    rc.ElectionTimeout,
		LeaderLeaseTimeout: rc.LeaderLeaseTimeout,
		ApplyTimeout:       10 * time.Second,
		MaxBatch:           256,
		MaxInFlight:        16,
		MaxQueue:           16384,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  4096,
		TrailingLogs:       4096,
	}
}

// withDefaults returns c with every zero duration and size replaced by its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&c.ElectionTimeout, d.ElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&c.ApplyTimeout, d.ApplyTimeout)
	setDur(&c.SnapshotInterval, d.SnapshotInterval)
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = d.MaxInFlight
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = d.MaxQueue
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	return c
}

// Validate reports every problem with c (zero fields take their defaults first), each
// saying what to change. Open calls it.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("raftnode: "+format, args...)) }

	if c.ID == "" {
		add("ID is empty: give every node a stable, unique ID (e.g. its pod or host name)")
	}
	if c.DataDir == "" {
		add("DataDir is empty: give every node its own persistent data directory")
	}
	if c.Transport == nil && c.Stream == nil {
		add("neither Transport nor Stream is set: pass the peer port's StreamLayer as Stream")
	}
	if c.Bootstrap && len(c.InitialCluster) > 0 {
		add("both Bootstrap and InitialCluster are set: use Bootstrap for a new one-node cluster, " +
			"or InitialCluster (on every initial member) for a new multi-node cluster")
	}
	if len(c.InitialCluster) > 0 {
		if err := checkInitialCluster(c.ID, c.Advertise, c.InitialCluster); err != nil {
			errs = append(errs, err)
		}
	}
	if c.TokenFloor > uint64(fsm.MaxToken) {
		add("TokenFloor %d is above the largest token %d: choose a floor from 0 to %d",
			c.TokenFloor, fsm.MaxToken, fsm.MaxToken)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout}, {"ApplyTimeout", c.ApplyTimeout},
		{"SnapshotInterval", c.SnapshotInterval},
	} {
		if d.v < 5*time.Millisecond {
			add("%s %v is too short: use at least 5ms (production: hundreds of milliseconds), or 0 for the default", d.name, d.v)
		}
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		add("LeaderLeaseTimeout %v is longer than HeartbeatTimeout %v: make it at most the heartbeat timeout",
			c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		add("ElectionTimeout %v is shorter than HeartbeatTimeout %v: make it at least the heartbeat timeout",
			c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.MaxBatch < 1 {
		add("MaxBatch %d: use a positive number of commands per entry, or 0 for the default (256)", c.MaxBatch)
	}
	if c.MaxInFlight < 1 {
		add("MaxInFlight %d: use a positive number of entries, or 0 for the default (16)", c.MaxInFlight)
	}
	if c.MaxQueue < c.MaxBatch {
		add("MaxQueue %d is smaller than MaxBatch %d: make the queue hold at least one full entry", c.MaxQueue, c.MaxBatch)
	}
	return errors.Join(errs...)
}

// checkInitialCluster checks the initial member list: no empty or duplicate IDs or
// addresses (raft rejects both), this node among them, at the address it advertises.
func checkInitialCluster(id, advertise string, peers []Peer) error {
	ids := make(map[string]bool, len(peers))
	addrs := make(map[string]bool, len(peers))
	self := false
	for i, p := range peers {
		switch {
		case p.ID == "" || p.Addr == "":
			return fmt.Errorf("raftnode: InitialCluster[%d] %q has an empty ID or address: give every member both", i, p.ID)
		case ids[p.ID]:
			return fmt.Errorf("raftnode: InitialCluster lists ID %q twice: every member needs its own ID", p.ID)
		case addrs[p.Addr]:
			return fmt.Errorf("raftnode: InitialCluster lists address %q twice: every member needs its own address", p.Addr)
		}
		ids[p.ID], addrs[p.Addr] = true, true
		if p.ID == id {
			self = true
			if advertise != "" && advertise != p.Addr {
				return fmt.Errorf("raftnode: InitialCluster gives %q the address %q but Advertise is %q: use the same address in both",
					id, p.Addr, advertise)
			}
		}
	}
	if !self {
		return fmt.Errorf("raftnode: InitialCluster does not list this node's ID %q: list every initial member, this one included, "+
			"or leave InitialCluster empty to start this node empty and add it with AddVoter", id)
	}
	return nil
}

// advertiseAddr is the address this node puts in the configuration it bootstraps.
func (c Config) advertiseAddr(trans raft.Transport) string {
	if c.Advertise != "" {
		return c.Advertise
	}
	for _, p := range c.InitialCluster {
		if p.ID == c.ID {
			return p.Addr
		}
	}
	return string(trans.LocalAddr())
}
