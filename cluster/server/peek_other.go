//go:build !unix

package server

import "syscall"

// peek cannot look into the socket buffer on this platform: a connection counts as silent
// until its reader has read its first byte.
func peek(syscall.RawConn) bool { return false }
