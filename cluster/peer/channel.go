package peer

import "fmt"

// The channels of the peer port: the first byte a dialer writes after the listener's hello.
// These are the only values; a byte not listed here is rejected.
const (
	// ChannelRaft carries hashicorp/raft NetworkTransport RPCs (see StreamLayer).
	ChannelRaft byte = 'r'
	// ChannelForward carries requests a follower forwards to the leader, in latch/1 frames.
	ChannelForward byte = 'f'
	// ChannelAdmin carries admin calls between nodes.
	ChannelAdmin byte = 'a'
	// ChannelForwardLeases carries requests a follower forwards to the leader, in the frames
	// of protocol revision 2 (wire.FlagLeases: grants with their age, extends). The forward
	// channel has no hello to negotiate in, so the revision is a channel of its own: a
	// follower dials it first and, when the leader's peer port refuses it (a latch that does
	// not know it), dials ChannelForward instead (DialFallback).
	ChannelForwardLeases byte = 'F'
)

// channels lists every channel, in the order Mux creates their listeners.
var channels = [...]byte{ChannelRaft, ChannelForward, ChannelAdmin, ChannelForwardLeases}

// knownChannel reports whether ch is one of the channels above.
func knownChannel(ch byte) bool {
	for _, c := range channels {
		if c == ch {
			return true
		}
	}
	return false
}

// channelName is ch for logs: its name, or its value in hex.
func channelName(ch byte) string {
	switch ch {
	case ChannelRaft:
		return "raft"
	case ChannelForward:
		return "forward"
	case ChannelAdmin:
		return "admin"
	case ChannelForwardLeases:
		return "forward-leases"
	}
	return fmt.Sprintf("0x%02x", ch)
}
