package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
	"github.com/latchd/latch/wire"
)

// The cluster's feature switch for protocol revision 2 (docs/protocol.md
// section 13, "A feature switch in the log, one-way"): the leader commits fsm.CmdEnable{FeatureLeases}
// once every server of the Raft configuration, voters and nonvoters, supports the revision,
// and never takes it back. Until then no node offers the revision to clients and no leader
// extends anything, so a cluster in a rolling upgrade speaks latch/1 throughout. A node of an
// older latch halts on an Enable entry (a version 2 batch), so once the switch is on a server
// whose peer port refuses the revision is refused membership (latch peers add, --join), and
// one that cannot be asked yet (added before it runs) enters as a nonvoter and gets its vote
// only once it answers (admit, proven). A downgrade of a member after the switch is on is
// not possible: that node halts on the log.
//
// How a server reports support: its peer port serves the revised forward channel
// (peer.ChannelForwardLeases), which exactly the builds that apply Enable and Extend serve
// (cluster/member serves it from the start, unless Config.HoldLeases). The leader dials that
// channel of each configured server and pings on it (probeLeases): a P back means that
// server's mux knows the channel and a session of revision 2 answers on it. A latch without
// the revision rejects the channel in the handshake (peer.ErrRejected); a server that is
// down or unreachable cannot be shown to support it, and the switch waits for it (or for its
// removal). Asking costs one peer handshake per server every featureProbeEvery, only while
// the switch is off on a leader; it needs nothing from an older latch but the verdict it
// already gives, and no new admin call (an older admin channel could not answer one).
//
// Races: the probe and the commit of Enable run under gate, and so does every membership
// change this node makes (membership.AddMember), so no server can enter the configuration
// between the probe that cleared the configuration and the commit. A change made by an
// earlier leader is in the log before this leader's barrier, so the configuration it probes
// has it. Promotions of a nonvoter and removals change nothing that was probed.

// featureProbeEvery is how often a leader asks again while the switch is off.
const featureProbeEvery = 3 * time.Second

// enableTimeout bounds the wait for the Enable entry's result (raftnode bounds it too).
const enableTimeout = 30 * time.Second

// errNoConfiguration stands for a configuration that could not be read: nothing was shown.
var errNoConfiguration = errors.New("the Raft configuration could not be read, or does not list this node")

// features runs the feature switch on the leader and guards membership changes once it is on.
// All methods may be called from any goroutine.
type features struct {
	log  hclog.Logger
	dial dialer // the peer port's dialer, stating no identity
	id   string
	rp   *atomic.Pointer[raftnode.Node] // nil until raft is open
	hold bool                           // Config.HoldLeases: this member does not support it
	gate chan struct{}                  // one slot: the probe and commit, or one membership change

	mu     sync.Mutex
	cancel context.CancelFunc // the running loop's; nil when none runs
	closed bool
	wg     sync.WaitGroup
}

// dialer dials channel ch of the peer port at addr.
type dialer func(ctx context.Context, addr string, ch byte) (net.Conn, error)

// newFeatures returns the switch of member id. cfg is the peer port's Config; the probes
// state no identity (handshake version 1), which the revised forward channel does not need,
// so that a node of an older latch rejects each probe once, not once per handshake version.
func newFeatures(log hclog.Logger, cfg peer.Config, id string, rp *atomic.Pointer[raftnode.Node], hold bool) *features {
	cfg.ID, cfg.Advertise = "", ""
	dial := func(ctx context.Context, addr string, ch byte) (net.Conn, error) {
		return peer.Dial(ctx, addr, ch, cfg)
	}
	return &features{log: log, dial: dial, id: id, rp: rp, hold: hold, gate: make(chan struct{}, 1)}
}

// leases reports whether the switch is on in this node's applied log. A nil features (a
// membership built without one, in tests) has it off and guards nothing.
func (f *features) leases() bool {
	if f == nil {
		return false
	}
	r := f.rp.Load()
	if r == nil {
		return false
	}
	return r.FSM().Features()&fsm.FeatureLeases != 0
}

// lead starts the switch's loop on a new leader (OnLeader; it never blocks).
func (f *features) lead() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(1)
	go f.run(ctx)
}

// follow stops the loop when leadership ends (OnFollower; it never blocks). A loop still
// finishing a round proposes nothing that counts: Submit refuses a node that does not lead.
func (f *features) follow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		f.cancel()
		f.cancel = nil
	}
}

// close stops the loop for good and waits for it.
func (f *features) close() {
	f.mu.Lock()
	f.closed = true
	if f.cancel != nil {
		f.cancel()
		f.cancel = nil
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// run tries to switch revision 2 on now and every featureProbeEvery, until it is on or ctx
// ends. A reason that stays the same is logged once.
func (f *features) run(ctx context.Context) {
	defer f.wg.Done()
	last := ""
	for {
		if f.leases() {
			return
		}
		err := f.enable(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		if msg := err.Error(); msg != last {
			last = msg
			f.log.Info("protocol revision 2 stays off until every server of the cluster serves it; asking again",
				"reason", err, "every", featureProbeEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(featureProbeEvery):
		}
	}
}

// enable probes every other server of the configuration and, when all serve revision 2,
// commits the switch. It holds the gate throughout.
func (f *features) enable(ctx context.Context) error {
	select {
	case f.gate <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.gate }()
	r := f.rp.Load()
	switch {
	case r == nil || !r.IsLeader():
		return errors.New("this node does not lead")
	case f.leases():
		return nil
	case f.hold:
		return errors.New("this node holds revision 2 back (HoldLeases)")
	}
	servers := r.Servers()
	self := false
	for _, s := range servers {
		if s.ID == f.id {
			self = true
			continue
		}
		if err := probeLeases(ctx, f.dial, s.Addr); err != nil {
			return fmt.Errorf("%s %s at %s: %w", s.Suffrage, s.ID, s.Addr, err)
		}
	}
	if !self {
		return errNoConfiguration
	}
	res, err := submitWait(ctx, r, fsm.Command{Kind: fsm.CmdEnable, Features: fsm.FeatureLeases})
	switch {
	case err != nil:
		return fmt.Errorf("committing the switch: %w", err)
	case res.Kind != fsm.Enabled || res.Features&fsm.FeatureLeases == 0:
		return fmt.Errorf("committing the switch: unexpected result %v", res.Kind)
	}
	f.log.Info("protocol revision 2 switched on for the cluster: every server serves it, so clients may now negotiate grant ages and extends; "+
		"one-way: a server of an older latch can no longer be added", "servers", len(servers))
	return nil
}

// submitWait proposes cmd and waits for its result, bounded by ctx and enableTimeout.
func submitWait(ctx context.Context, r *raftnode.Node, cmd fsm.Command) (fsm.Result, error) {
	type result struct {
		res fsm.Result
		err error
	}
	done := make(chan result, 1) // the callback (on raft's FSM goroutine) never waits for this one
	r.Submit(cmd, func(res fsm.Result, err error) { done <- result{res, err} })
	t := time.NewTimer(enableTimeout)
	defer t.Stop()
	select {
	case d := <-done:
		return d.res, d.err
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	case <-t.C:
		return fsm.Result{}, fmt.Errorf("no result within %v", enableTimeout)
	}
}

// admit takes the gate for a membership change that adds id at addr (release gives it back)
// and, once the switch is on, refuses a server whose peer port refuses the revised forward
// channel: a latch without revision 2 would halt on the log it is sent, and the cluster
// cannot switch back. A server that cannot be asked at all (latch peers add before the node
// runs) may still enter as a nonvoter, which neither votes nor leads; proven keeps its vote
// back until it answers.
func (f *features) admit(ctx context.Context, id, addr string) (release func(), err error) {
	if f == nil {
		return func() {}, nil
	}
	select {
	case f.gate <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release = func() { <-f.gate }
	if !f.leases() {
		return release, nil
	}
	switch err = probeLeases(ctx, f.dial, addr); {
	case err == nil:
	case errors.Is(err, peer.ErrRejected):
		release()
		return nil, outcome.New(outcome.Refused, fmt.Errorf("the cluster runs protocol revision 2 (switched on for good) and %s at %s does not serve it: "+
			"its peer port refused the revised forward channel, so it runs an older latch (or does not hold this cluster's --peer-secret-file); "+
			"upgrade it before adding it", id, addr))
	default:
		f.log.Warn("cannot ask the new member whether it serves protocol revision 2, which the cluster runs; "+
			"it may enter as a nonvoter, and gets no vote until it shows it does", "id", id, "addr", addr, "error", err)
	}
	return release, nil
}

// proven wraps lastIndex, which a new voter's catch-up polls (raftnode.AddVoterCaughtUp), so
// that while the switch is on no answer counts until the node at addr has shown that it
// serves revision 2: without that it stays a nonvoter.
func (f *features) proven(addr string, lastIndex func(context.Context) (uint64, error)) func(context.Context) (uint64, error) {
	if f == nil {
		return lastIndex
	}
	shown := false
	return func(ctx context.Context) (uint64, error) {
		if !shown && f.leases() {
			if err := probeLeases(ctx, f.dial, addr); err != nil {
				return 0, fmt.Errorf("it has not shown that it serves protocol revision 2, which the cluster runs (it gets no vote before): %w", err)
			}
			shown = true
		}
		return lastIndex(ctx)
	}
}

// probeLeases asks the node at addr whether it serves protocol revision 2: it dials that
// node's revised forward channel (peer.ChannelForwardLeases) and pings on it. nil means a
// session of revision 2 answered; an error wrapping peer.ErrRejected means the node's peer
// port refused the channel (a latch without the revision), any other error that it could not
// be asked.
func probeLeases(ctx context.Context, dial dialer, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	nc, err := dial(ctx, addr, peer.ChannelForwardLeases)
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := nc.Write(wire.AppendRequest(nil, &wire.Request{Op: wire.OpPing, Owner: 1})); err != nil {
		return fmt.Errorf("ping on the revised forward channel: %w", err)
	}
	return awaitPing(nc)
}

// awaitPing reads nc, a forward channel of revision 2, until the answer to ping 1.
func awaitPing(nc net.Conn) error {
	dec := wire.NewResponseDecoder()
	dec.SetFlags(wire.FlagLeases)
	buf := make([]byte, 64)
	for {
		n, err := nc.Read(buf)
		for p := buf[:n]; len(p) > 0; {
			used, done, derr := dec.Decode(p)
			p = p[used:]
			if derr != nil {
				return fmt.Errorf("answer on the revised forward channel: %w", derr)
			}
			if done {
				if r := dec.Response(); r.Op != wire.OpPing || r.Owner != 1 {
					return fmt.Errorf("answer on the revised forward channel: %v for owner %d, want P for the ping", r.Op, r.Owner)
				}
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("answer on the revised forward channel: %w", err)
		}
	}
}
