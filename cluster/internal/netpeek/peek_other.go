//go:build !unix

package netpeek

import "net"

// HasInput cannot look into the socket buffer on this platform: a connection counts as
// silent until its reader has read its first byte.
func HasInput(net.Conn) bool { return false }
