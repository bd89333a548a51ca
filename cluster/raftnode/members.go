package raftnode

import (
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Membership cache: the voters and nonvoters of this node's latest configuration, which
// every incoming Raft RPC is checked against (filter.go) and so is every Raft connection of
// the peer port (CheckPeer). It is refreshed every membersRefresh and when a sender it does
// not know shows up (at most every membersRecheck), from raft's GetConfiguration, which in hashicorp/raft v1.8 reads an
// atomic copy and never waits for raft's main loop. Reading it is an atomic load and a map
// lookup.
const (
	membersRefresh = time.Second
	membersRecheck = 50 * time.Millisecond
)

// ErrNotMember is why an RPC or a Raft connection is refused: its sender is not a voter or
// nonvoter of this node's configuration (or not at the address the configuration holds).
var ErrNotMember = errors.New("not a voter or nonvoter of this node's Raft configuration")

// errMembersUnknown refuses what arrives before the cache is first filled (while Open runs).
var errMembersUnknown = errors.New("this node is starting and does not know its Raft configuration yet")

// memberSet is one snapshot of the configuration: server ID -> address.
type memberSet map[string]string

// members is the cache. The zero value refuses everything until start.
type members struct {
	set       atomic.Pointer[memberSet]
	raft      atomic.Pointer[raft.Raft]
	lastCheck atomic.Int64 // unix nanoseconds of the last refresh on an unknown sender
	log       hclog.Logger
}

// start fills the cache from r and keeps it current until stop closes.
func (m *members) start(r *raft.Raft, stop <-chan struct{}) {
	m.raft.Store(r)
	m.refresh()
	go func() {
		t := time.NewTicker(membersRefresh)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.refresh()
			case <-stop:
				return
			}
		}
	}()
}

// refresh reads the latest configuration into the cache and returns it; nil before start.
func (m *members) refresh() memberSet {
	r := m.raft.Load()
	if r == nil {
		return nil
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		m.log.Warn("reading the Raft configuration for the membership check failed; keeping the previous one", "error", err)
		return m.load()
	}
	set := memberSet{}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter || s.Suffrage == raft.Nonvoter {
			set[string(s.ID)] = string(s.Address)
		}
	}
	if old := m.load(); old != nil && maps.Equal(old, set) {
		return old
	}
	m.set.Store(&set)
	m.log.Debug("Raft membership for the RPC check", "servers", len(set))
	return set
}

// load returns the cached set; nil before start.
func (m *members) load() memberSet {
	if p := m.set.Load(); p != nil {
		return *p
	}
	return nil
}

// lookup returns the cached set and whether id is in it. When id is not, it refreshes the
// cache first (at most every membersRecheck), so that a member added a moment ago is found.
func (m *members) lookup(id string) (memberSet, bool) {
	set := m.load()
	if _, ok := set[id]; ok || set == nil {
		return set, ok
	}
	now, last := time.Now().UnixNano(), m.lastCheck.Load()
	if now-last >= int64(membersRecheck) && m.lastCheck.CompareAndSwap(last, now) {
		set = m.refresh()
	}
	_, ok := set[id]
	return set, ok
}

// check reports why a sender that names itself id (and, if addr is not empty, states addr)
// may not speak Raft to this node, or nil. With an empty configuration (this node has never
// been in a cluster and waits to be added) every sender passes unless strict: the leader
// that adds it is in no configuration it knows yet.
func (m *members) check(id, addr string, strict bool) error {
	set, ok := m.lookup(id)
	switch {
	case set == nil:
		return errMembersUnknown
	case ok && addr != "" && set[id] != addr:
		return fmt.Errorf("%w at %s: the configuration has %q at %s", ErrNotMember, addr, id, set[id])
	case ok:
		return nil
	case len(set) == 0 && !strict:
		return nil
	}
	return ErrNotMember
}

// CheckPeer returns nil when the node that stated id and addr in the peer handshake may
// open a Raft connection to this node: it is a voter or nonvoter of this node's latest
// configuration at exactly that address, or this node has no configuration yet (it waits to
// be added; then anyone holding the peer credential may). Otherwise the error wraps
// ErrNotMember. It costs a map lookup; wire it into the peer port's Raft admission.
func (n *Node) CheckPeer(id, addr string) error {
	return n.members.check(id, addr, false)
}
