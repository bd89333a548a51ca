package raftnode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
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

// Vouching (Config.Vouch): a sender another member vouches for is admitted for vouchTTL and
// asked about again once less than half of it is left; one sender is asked about at most
// every vouchRetry, any sender at most every vouchGap, one at a time, each ask bounded by
// vouchTimeout; at most maxVouched senders are remembered.
const (
	vouchTTL     = time.Minute
	vouchRetry   = 5 * time.Second
	vouchGap     = 100 * time.Millisecond
	vouchTimeout = 5 * time.Second
	maxVouched   = 64
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
	self      string
	vouch     func(ctx context.Context, id string, members []Peer) (addr string, ok bool)
	stop      <-chan struct{}

	expected atomic.Pointer[memberSet]          // ExpectPeers: stands in for an empty configuration
	vouched  atomic.Pointer[map[string]voucher] // copy on write, under mu
	mu       sync.Mutex
	asked    map[string]time.Time // last ask per sender
	lastAsk  time.Time            // last ask for any sender
	inflight bool
}

// voucher is a sender another member vouched for.
type voucher struct {
	addr  string // where that member's configuration has it
	until time.Time
}

// start fills the cache from r and keeps it current until stop closes.
func (m *members) start(r *raft.Raft, stop <-chan struct{}) {
	m.raft.Store(r)
	m.stop = stop
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
	if e := m.expected.Load(); len(set) == 0 && e != nil {
		set = maps.Clone(*e)
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
// that adds it is in no configuration it knows yet. A sender another member vouched for
// passes too (see Config.Vouch); an unknown one is asked about.
func (m *members) check(id, addr string, strict bool) error {
	set, ok := m.lookup(id)
	switch {
	case set == nil:
		return errMembersUnknown
	case ok && addr != "" && set[id] != addr:
		if m.vouchedFor(id, addr, set) {
			return nil // its address changed in a configuration this node has not seen
		}
		return fmt.Errorf("%w at %s: the configuration has %q at %s", ErrNotMember, addr, id, set[id])
	case ok:
		return nil
	case len(set) == 0 && !strict:
		return nil
	case m.vouchedFor(id, addr, set):
		return nil
	}
	return ErrNotMember
}

// vouchedFor reports whether a member vouched for id (at addr, if not empty) and the vouch
// holds. When none does, or it runs out soon, it asks (on another goroutine).
func (m *members) vouchedFor(id, addr string, set memberSet) bool {
	if m.vouch == nil || id == "" {
		return false
	}
	var v voucher
	var ok bool
	if p := m.vouched.Load(); p != nil {
		v, ok = (*p)[id]
	}
	now := time.Now()
	if !ok || v.until.Sub(now) < vouchTTL/2 {
		m.ask(id, set, now)
	}
	return ok && now.Before(v.until) && (addr == "" || addr == v.addr)
}

// ask asks Config.Vouch about id on a goroutine of its own, unless the limits say not now.
func (m *members) ask(id string, set memberSet, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.asked == nil {
		m.asked = map[string]time.Time{}
	}
	if m.inflight || now.Sub(m.lastAsk) < vouchGap || now.Sub(m.asked[id]) < vouchRetry {
		return
	}
	for s, t := range m.asked {
		if now.Sub(t) >= vouchRetry {
			delete(m.asked, s)
		}
	}
	var peers []Peer
	for sid, addr := range set {
		if sid != m.self {
			peers = append(peers, Peer{ID: sid, Addr: addr})
		}
	}
	if len(m.asked) >= maxVouched || len(peers) == 0 {
		return
	}
	m.asked[id], m.lastAsk, m.inflight = now, now, true
	go m.askNow(id, peers)
}

func (m *members) askNow(id string, peers []Peer) {
	ctx, cancel := context.WithTimeout(context.Background(), vouchTimeout)
	defer cancel()
	go func() { // Shutdown ends the ask
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	addr, ok := m.vouch(ctx, id, peers)

	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight = false
	old := map[string]voucher{}
	if p := m.vouched.Load(); p != nil {
		old = *p
	}
	next := make(map[string]voucher, len(old)+1)
	now := time.Now()
	for s, v := range old {
		if now.Before(v.until) {
			next[s] = v // a failed ask does not end a vouch early: it runs out
		}
	}
	if _, had := next[id]; ok && (had || len(next) < maxVouched) {
		next[id] = voucher{addr: addr, until: now.Add(vouchTTL)}
		if _, had := old[id]; !had {
			m.log.Info("another member vouches for a Raft sender this node's configuration does not have yet (it lags behind a membership change); admitting it",
				"sender", id, "addr", addr, "for", vouchTTL)
		}
	}
	m.vouched.Store(&next)
}

// ExpectPeers tells a node that waits to be added (its configuration is empty) whom to
// expect: until its configuration has servers, peers stands in for it, so only those IDs
// (and on the peer port, only at those addresses) may speak Raft to it, instead of anyone
// holding the peer credential. A leader elected since peers was read is admitted if one of
// peers vouches for it (Config.Vouch). Call it before asking the cluster to add this node:
// the leader sends its first AppendEntries right after. It changes nothing once the node has
// a configuration.
func (n *Node) ExpectPeers(peers []Peer) {
	set := memberSet{}
	for _, p := range peers {
		set[p.ID] = p.Addr
	}
	n.members.expected.Store(&set)
	n.members.refresh()
}

// CheckPeer returns nil when the node that stated id and addr in the peer handshake may
// open a Raft connection to this node: it is a voter or nonvoter of this node's latest
// configuration at exactly that address, or this node has no configuration yet (it waits to
// be added; then anyone holding the peer credential may, unless ExpectPeers said whom to
// expect), or a member vouched for it (Config.Vouch). Otherwise the error wraps
// ErrNotMember. It costs a map lookup; wire it into the peer port's Raft admission.
func (n *Node) CheckPeer(id, addr string) error {
	return n.members.check(id, addr, false)
}
