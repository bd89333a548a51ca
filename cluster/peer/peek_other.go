//go:build !unix

package peer

import "net"

// hasInput cannot look into the socket buffer on this platform: a connection counts as silent
// until its handshake goroutine has read its first byte.
func hasInput(net.Conn) bool { return false }
