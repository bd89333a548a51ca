package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/internal/ratelog"
)

// ErrNotAdvertisable is returned by NewStreamLayer when the address other nodes would be told
// to dial is not one they can dial.
var ErrNotAdvertisable = errors.New("the peer port listens on all interfaces, which other nodes cannot dial: give the stream layer an advertise address (host:port) they can reach")

// StreamLayer is the raft.StreamLayer of a node: it accepts the Mux's ChannelRaft connections
// and dials ChannelRaft of other nodes with the Mux's Config. Build the transport with
//
//	raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, ...})
//
// The transport's one accept loop only ever sees connections that passed the handshake, and
// the handshake runs in the Mux's goroutines, never inside Accept. Of those, Accept hands on
// only the ones its Admission admits (see SetAdmission); it closes the others and logs each
// source once a minute. Closing the layer (the transport does, on Close) stops the Raft
// channel only; the Mux is closed by its owner.
type StreamLayer struct {
	m         *Mux
	ln        net.Listener
	advertise net.Addr
	admission atomic.Pointer[Admission]
	refused   atomic.Uint64
	refusals  *ratelog.Limiter
}

// Admission decides which authenticated Raft connections a StreamLayer hands to raft.
type Admission struct {
	// Check, if set, is asked about every connection whose dialer stated an Identity, and
	// returns nil if that node may speak Raft to this one (for latch: it is a voter or
	// nonvoter of this node's configuration, at that address, or this node has none yet).
	// It runs in raft's accept loop, so it must be quick (a map lookup). Nil admits every
	// stated identity.
	Check func(Identity) error
	// Legacy admits connections whose dialer stated no identity: nodes of a latch version
	// before handshake version 2, during a rolling upgrade. Raft then has only the sender
	// named inside each RPC to go by.
	Legacy bool
}

// ErrNoIdentity is why a StreamLayer refuses a Raft connection that stated no identity.
var ErrNoIdentity = errors.New("the dialer stated no node identity (a node of an older latch version, or no node): " +
	"upgrade it, or start this node with --accept-legacy-peers for the time of a rolling upgrade")

// ErrNotReady may be returned (or wrapped) by an Admission's Check while the node cannot
// say yet (its Raft is starting): the connection is refused without a warning.
var ErrNotReady = errors.New("this node's Raft is not running yet")

// refusalInterval is how often a refused source is logged.
const refusalInterval = time.Minute

// maxRefusalSources is how many refused sources the layer remembers for its log limit.
const maxRefusalSources = 256

var _ raft.StreamLayer = (*StreamLayer)(nil)

// NewStreamLayer returns the StreamLayer over m's Raft channel. advertise is the address
// other nodes dial to reach this one; nil means m's listen address, which must then not be
// an unspecified IP (0.0.0.0 or ::).
func NewStreamLayer(m *Mux, advertise net.Addr) (*StreamLayer, error) {
	if advertise == nil {
		advertise = m.Addr()
	}
	if tcp, ok := advertise.(*net.TCPAddr); ok && (tcp.IP == nil || tcp.IP.IsUnspecified()) {
		return nil, fmt.Errorf("peer: advertise address %s: %w", advertise, ErrNotAdvertisable)
	}
	return &StreamLayer{m: m, ln: m.Listener(ChannelRaft), advertise: advertise,
		refusals: ratelog.New(refusalInterval, maxRefusalSources)}, nil
}

// SetAdmission sets the Admission that Accept applies from now on. Until it is first
// called, every authenticated connection is admitted, identity or not.
func (s *StreamLayer) SetAdmission(a Admission) { s.admission.Store(&a) }

// Refused is the number of authenticated connections Accept closed because its Admission
// refused them.
func (s *StreamLayer) Refused() uint64 { return s.refused.Load() }

// Accept returns the next authenticated Raft connection that the Admission admits.
func (s *StreamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return nil, err
		}
		id := IdentityOf(c)
		if err := s.admit(id); err != nil {
			_ = c.Close()
			s.refused.Add(1)
			if errors.Is(err, ErrNotReady) {
				s.m.log.Debug("refusing a Raft connection", "peer", id.String(), "remote", c.RemoteAddr().String(), "reason", err)
			} else if n, ok := s.refusals.Allow(id.String() + " " + remoteHost(c)); ok {
				s.m.log.Warn("refusing a Raft connection", "peer", id.String(), "remote", c.RemoteAddr().String(), "reason", err, "suppressed", n)
			}
			continue
		}
		return c, nil
	}
}

// admit applies the Admission to a connection that stated id.
func (s *StreamLayer) admit(id Identity) error {
	a := s.admission.Load()
	switch {
	case a == nil:
		return nil
	case !id.Stated():
		if a.Legacy {
			return nil
		}
		return ErrNoIdentity
	case a.Check != nil:
		return a.Check(id)
	}
	return nil
}

// remoteHost is the host of c's remote address, for grouping refusals by source.
func remoteHost(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// Close stops the Raft channel.
func (s *StreamLayer) Close() error { return s.ln.Close() }

// Addr is the advertised address; raft uses it as this node's transport address.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to the Raft channel of the node at address, connect and handshake within
// timeout (and the Config's HandshakeTimeout).
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return s.m.Dial(ctx, string(address), ChannelRaft)
}
