package raftnode

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/internal/ratelog"
)

// snapshotDrainLimit is the largest refused InstallSnapshot whose data the filter reads to
// its end, so that the connection stays usable; a larger one is answered at once and its
// connection is lost to the transport (it reads the rest as the next RPCs, fails and closes).
const snapshotDrainLimit = 256 << 20

// Sources of refused RPCs the filter remembers for each of its two log limits (senders that
// are not members, members that send malformed RPCs), and how often it logs each.
const (
	maxRefusalSources = 256
	refusalInterval   = time.Minute
)

// filter is the raft.Transport raft runs on. It wraps the real transport and hands raft
// only the RPCs whose sender, the ID in the RPC's header, is a voter or nonvoter of this
// node's latest configuration (members); it answers every other RPC with an error at once,
// so the sender's goroutine does not hang, and logs each refused sender once a minute.
// Heartbeats, which the real transport may hand to raft's fast path instead of its
// consumer channel, are checked the same way. With an empty configuration (a node waiting
// to be added) every RPC but TimeoutNow passes. An RPC that passes is then checked for
// fields no correct raft peer sends (validate.go): one that would crash raft or corrupt its
// state is refused the same way, and logged once a minute per sender with the reason.
//
// One goroutine moves RPCs from the real transport's consumer channel to raft's; the check
// is a map lookup and a loop over the entries, so the leader's AppendEntries stream pays an
// extra channel hand-off and nothing that allocates or waits on raft.
type filter struct {
	raft.Transport
	members      *members
	out          chan raft.RPC
	done         chan struct{}
	stopOnce     sync.Once
	log          hclog.Logger
	refusals     *ratelog.Limiter // senders that are not members
	malformedLog *ratelog.Limiter // members whose RPCs fail validate
	refused      atomic.Uint64    // every refused RPC
	malformed    atomic.Uint64    // the refused RPCs that failed validate
	// amnesiac: this node started with no state and has not caught up (amnesia.go): it
	// takes part in no election.
	amnesiac    atomic.Bool
	withheldLog *ratelog.Limiter // senders of election RPCs refused while amnesiac
}

// withPreVote is the filter over a transport that supports pre-vote; raft enables pre-vote
// only if the transport it is given implements raft.WithPreVote.
type withPreVote struct{ *filter }

// RequestPreVote sends a pre-vote request through the real transport, unless this node
// withholds (amnesia.go).
func (f withPreVote) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if f.amnesiac.Load() {
		return errWithheld
	}
	return f.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func newFilter(inner raft.Transport, m *members, log hclog.Logger) *filter {
	return &filter{
		Transport:    inner,
		members:      m,
		out:          make(chan raft.RPC),
		done:         make(chan struct{}),
		log:          log,
		refusals:     ratelog.New(refusalInterval, maxRefusalSources),
		malformedLog: ratelog.New(refusalInterval, maxRefusalSources),
		withheldLog:  ratelog.New(refusalInterval, maxRefusalSources),
	}
}

// transport is what raft is given: the filter, with pre-vote if the real transport has it.
func (f *filter) transport() raft.Transport {
	if _, ok := f.Transport.(raft.WithPreVote); ok {
		return withPreVote{f}
	}
	return f
}

// start begins moving RPCs to raft; call it once members is filled.
func (f *filter) start() { go f.forward() }

// stop ends the forwarding goroutine; idempotent.
func (f *filter) stop() { f.stopOnce.Do(func() { close(f.done) }) }

// Consumer is the channel raft reads RPCs from: only admitted ones arrive there.
func (f *filter) Consumer() <-chan raft.RPC { return f.out }

// SetHeartbeatHandler installs cb behind the membership check on the real transport's
// heartbeat fast path.
func (f *filter) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		f.Transport.SetHeartbeatHandler(nil)
		return
	}
	f.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if f.admit(rpc) {
			cb(rpc)
		}
	})
}

// Close stops the filter and closes the real transport if it can be closed.
func (f *filter) Close() error {
	f.stop()
	if c, ok := f.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// CloseStreams closes the real transport's pooled outgoing connections, if it has any.
func (f *filter) CloseStreams() {
	if cs, ok := f.Transport.(interface{ CloseStreams() }); ok {
		cs.CloseStreams()
	}
}

// Refused is the number of RPCs refused so far, for either reason.
func (f *filter) Refused() uint64 { return f.refused.Load() }

// Malformed is the number of RPCs refused so far because they failed validate.
func (f *filter) Malformed() uint64 { return f.malformed.Load() }

func (f *filter) forward() {
	in := f.Transport.Consumer()
	for {
		select {
		case rpc := <-in:
			if !f.admit(rpc) {
				continue
			}
			select {
			case f.out <- rpc:
			case <-f.done:
				rpc.Respond(emptyResponse(rpc.Command), raft.ErrTransportShutdown)
				return
			}
		case <-f.done:
			return
		}
	}
}

// admit reports whether rpc may go to raft. If not, it has answered rpc (or will, for an
// InstallSnapshot whose data is being read) and logged the refusal, once per source.
func (f *filter) admit(rpc raft.RPC) bool {
	idb, kind := sender(rpc.Command)
	if _, ok := f.members.load()[string(idb)]; !ok { // the hot path: a map lookup, no allocation
		id := string(idb)
		if err := f.members.check(id, "", kind == "TimeoutNow"); err != nil {
			f.refuse(rpc, id, kind, err)
			return false
		}
	}
	if err := validate(rpc.Command); err != nil {
		f.malformed.Add(1)
		f.refuse(rpc, string(idb), kind, err)
		return false
	}
	if f.amnesiac.Load() && electionRPC(rpc.Command) {
		f.withhold(rpc, string(idb), kind)
		return false
	}
	return true
}

// refuse answers rpc with err and logs it, once a minute per sender and reason (not a
// member, or a malformed RPC: ErrMalformedRPC).
func (f *filter) refuse(rpc raft.RPC, id, kind string, err error) {
	f.refused.Add(1)
	refusal := fmt.Errorf("latch: %s refused: sender %q: %w", kind, id, err)
	if errors.Is(err, ErrMalformedRPC) {
		if n, ok := f.malformedLog.Allow(id); ok {
			f.log.Warn("refusing a malformed Raft RPC from a member: a faulty node, or a peer-credential holder posing as that member",
				"sender", id, "rpc", kind, "reason", err, "suppressed", n)
		}
	} else if n, ok := f.refusals.Allow(id); ok {
		f.log.Warn("refusing Raft RPCs from a sender outside the configuration", "sender", id, "rpc", kind, "reason", err, "suppressed", n)
	}
	if req, ok := rpc.Command.(*raft.InstallSnapshotRequest); ok && rpc.Reader != nil && req.Size <= snapshotDrainLimit {
		// The real transport reads the next RPC from the same stream once answered: read
		// the snapshot off it first, on a goroutine of its own, never on the forwarder's.
		go func() {
			_, _ = io.Copy(io.Discard, rpc.Reader)
			rpc.Respond(emptyResponse(rpc.Command), refusal)
		}()
		return
	}
	rpc.Respond(emptyResponse(rpc.Command), refusal)
}

// emptyResponse is the zero response of the RPC cmd's type, sent with a refusal: raft's TCP
// transport carries an error without a body, but its in-memory pipeline (v1.8.0,
// inmemPipeline.decodeResponses) dereferences the body and would panic on nil.
func emptyResponse(cmd any) any {
	switch cmd.(type) {
	case *raft.AppendEntriesRequest:
		return &raft.AppendEntriesResponse{}
	case *raft.RequestVoteRequest:
		return &raft.RequestVoteResponse{}
	case *raft.RequestPreVoteRequest:
		return &raft.RequestPreVoteResponse{}
	case *raft.InstallSnapshotRequest:
		return &raft.InstallSnapshotResponse{}
	case *raft.TimeoutNowRequest:
		return &raft.TimeoutNowResponse{}
	}
	return nil
}

// sender returns the server ID an RPC names as its sender and the RPC's name for logs.
func sender(cmd any) (id []byte, kind string) {
	switch c := cmd.(type) {
	case *raft.AppendEntriesRequest:
		kind = "AppendEntries"
	case *raft.RequestVoteRequest:
		kind = "RequestVote"
	case *raft.RequestPreVoteRequest:
		kind = "RequestPreVote"
	case *raft.InstallSnapshotRequest:
		kind = "InstallSnapshot"
	case *raft.TimeoutNowRequest:
		kind = "TimeoutNow"
	default:
		return nil, fmt.Sprintf("%T", c)
	}
	if h, ok := cmd.(raft.WithRPCHeader); ok {
		return h.GetRPCHeader().ID, kind
	}
	return nil, kind
}
