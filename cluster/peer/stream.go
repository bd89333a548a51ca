package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
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
// the handshake runs in the Mux's goroutines, never inside Accept. Closing the layer (the
// transport does, on Close) stops the Raft channel only; the Mux is closed by its owner.
type StreamLayer struct {
	m         *Mux
	ln        net.Listener
	advertise net.Addr
}

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
	return &StreamLayer{m: m, ln: m.Listener(ChannelRaft), advertise: advertise}, nil
}

// Accept returns the next authenticated Raft connection.
func (s *StreamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }

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
