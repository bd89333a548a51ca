//go:build unix

package netpeek

import (
	"net"
	"syscall"
)

// HasInput reports whether bytes wait in c's socket buffer (for TLS, the TCP connection under
// it), without reading them or blocking. It is false when it cannot tell. It uses the
// socket's Control, not Read: Read would wait for the read lock of the goroutine that reads
// the connection.
func HasInput(c net.Conn) bool {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return n > 0
}
