package raftnode

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// peerSummaryInterval is how often a peer that stays unreachable is logged again.
const peerSummaryInterval = time.Minute

// peerQuiet is how long without a failure ends a peer's outage for the log even without a
// resumed heartbeat (this node stopped leading, say): the next failure is a new outage.
const peerQuiet = 30 * time.Second

// peerFailures are raft's per-attempt lines about a peer it cannot reach: on a leader two or
// more a second per down peer, for as long as it is down.
var peerFailures = []string{
	"failed to heartbeat to",
	"failed to appendEntries to",
	"failed to pipeline appendEntries",
	"failed to start pipeline replication to",
	"failed to contact",
}

// peerLog is the logger raft writes to. It passes every line through except raft's
// per-attempt failures to reach a peer: those become one WARN when the peer stops
// answering, a summary once a minute while it stays down, and one INFO when it answers
// again (resumed, from raft's heartbeat observation). Values raft logs as structs (a
// raft.Server) are written as "id (address)".
type peerLog struct {
	hclog.Logger
	st *peerStates
}

type peerStates struct {
	mu     sync.Mutex
	log    hclog.Logger // where the state changes go
	peers  map[string]*peerState
	addrOf func(id string) string // a member's address by ID; "" if unknown
}

type peerState struct {
	since, last, logged time.Time
	failures            uint64
	err                 any
}

func newPeerLog(l hclog.Logger) peerLog {
	return peerLog{Logger: l, st: &peerStates{log: l, peers: map[string]*peerState{}}}
}

func (p peerLog) Log(level hclog.Level, msg string, args ...any) {
	if level >= hclog.Warn && p.st.failed(msg, args) {
		return
	}
	p.Logger.Log(level, msg, readable(args)...)
}

func (p peerLog) Trace(msg string, args ...any) { p.Log(hclog.Trace, msg, args...) }
func (p peerLog) Debug(msg string, args ...any) { p.Log(hclog.Debug, msg, args...) }
func (p peerLog) Info(msg string, args ...any)  { p.Log(hclog.Info, msg, args...) }
func (p peerLog) Warn(msg string, args ...any)  { p.Log(hclog.Warn, msg, args...) }
func (p peerLog) Error(msg string, args ...any) { p.Log(hclog.Error, msg, args...) }

func (p peerLog) With(args ...any) hclog.Logger {
	return peerLog{Logger: p.Logger.With(readable(args)...), st: p.st}
}
func (p peerLog) Named(name string) hclog.Logger {
	return peerLog{Logger: p.Logger.Named(name), st: p.st}
}
func (p peerLog) ResetNamed(name string) hclog.Logger {
	return peerLog{Logger: p.Logger.ResetNamed(name), st: p.st}
}

// failed takes a line about a peer that could not be reached, logging what changed; it
// reports false for every other line.
func (s *peerStates) failed(msg string, args []any) bool {
	known := false
	for _, f := range peerFailures {
		known = known || strings.HasPrefix(msg, f)
	}
	if !known {
		return false
	}
	var peer string
	var err any
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "peer":
			peer = peerName(args[i+1])
		case "server-id":
			if peer = peerName(args[i+1]); s.addrOf != nil && s.addrOf(peer) != "" {
				peer = s.addrOf(peer)
			}
		case "error":
			err = args[i+1]
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.peers[peer]
	if st == nil || now.Sub(st.last) > peerQuiet {
		s.peers[peer] = &peerState{since: now, last: now, logged: now, failures: 1, err: err}
		s.log.Warn("cannot reach peer; further failures are summarised once a minute until it answers",
			"peer", peer, "what", msg, "error", err)
		return true
	}
	st.failures++
	st.last = now
	if err != nil {
		st.err = err
	}
	if now.Sub(st.logged) >= peerSummaryInterval {
		st.logged = now
		s.log.Warn("peer still unreachable", "peer", peer, "failures", st.failures, "down_for", now.Sub(st.since).Round(time.Second), "error", st.err)
	}
	return true
}

// resumed ends the outage of the peer at addr (or named id), logging it if there was one.
func (s *peerStates) resumed(id, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []string{addr, id} {
		if st, ok := s.peers[k]; ok && k != "" {
			delete(s.peers, k)
			s.log.Info("peer reachable again", "peer", k, "id", id, "failures", st.failures, "down_for", time.Since(st.since).Round(time.Second))
		}
	}
}

// peerName is how the failure lines name a peer: its address (raft.Server: its address).
func peerName(v any) string {
	switch p := v.(type) {
	case raft.Server:
		return string(p.Address)
	case raft.ServerAddress:
		return string(p)
	case raft.ServerID:
		return string(p)
	}
	return fmt.Sprint(v)
}

// readable replaces raft's structs among args with text: a raft.Server is "id (address)".
func readable(args []any) []any {
	for i, a := range args {
		if s, ok := a.(raft.Server); ok {
			out := append([]any(nil), args...)
			out[i] = fmt.Sprintf("%s (%s)", s.ID, s.Address)
			return readable(out)
		}
	}
	return args
}

// watchPeers reports peers that answer heartbeats again to the peer log until stop closes.
func (n *Node) watchPeers(st *peerStates, stop <-chan struct{}) {
	ch, stopObserving := observe[raft.ResumedHeartbeatObservation](n.raft, 16)
	defer stopObserving()
	for {
		select {
		case o := <-ch:
			id := string(o.Data.(raft.ResumedHeartbeatObservation).PeerID)
			var addr string
			if set := n.members.set.Load(); set != nil {
				addr = (*set)[id]
			}
			st.resumed(id, addr)
		case <-stop:
			return
		}
	}
}
