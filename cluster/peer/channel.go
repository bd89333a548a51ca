package peer

import "fmt"

// The channels of the peer port: the first byte a dialer writes after the listener's hello.
// These are the only values; a byte not listed here is rejected.
const (
	// ChannelRaft carries hashicorp/raft NetworkTransport RPCs (see StreamLayer).
	ChannelRaft byte = 'r'
	// ChannelForward carries requests a follower forwards to the leader.
	ChannelForward byte = 'f'
	// ChannelAdmin carries admin calls between nodes.
	ChannelAdmin byte = 'a'
)

// channels lists every channel, in the order Mux creates their listeners.
var channels = [...]byte{ChannelRaft, ChannelForward, ChannelAdmin}

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
	}
	return fmt.Sprintf("0x%02x", ch)
}
