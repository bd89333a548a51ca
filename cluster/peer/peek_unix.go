//go:build unix

package peer

import (
	"net"
	"syscall"
)

// hasInput reports whether bytes from the other side wait in c's socket buffer, without
// reading them or blocking. It is false when it cannot tell.
func hasInput(c net.Conn) bool {
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
	// Control, not Read: Read would wait for the read lock the handshake goroutine holds.
	if err := rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return n > 0
}
