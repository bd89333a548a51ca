//go:build unix

package server

import "syscall"

// peek reports whether bytes wait in the socket's receive buffer, without reading them or
// blocking. Control, not Read: Read would wait for the read lock the session's reader holds.
func peek(rc syscall.RawConn) bool {
	var n int
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return n > 0
}
