// Package wiretest is test-only: helpers that speak latch/1 (docs/protocol.md) as raw frames over
// a real TCP connection, so that server tests can send exactly the bytes they mean, broken
// ones included, and check exactly what comes back.
//
// Frames are built here byte by byte from the tables of docs/protocol.md sections 3.1 and 3.2, not
// with wire's encoder, so that a test checks the server against the contract rather than
// against the codec it shares (SendRequest, which uses wire.AppendRequest, is the exception).
// Responses are read with wire's response decoder.
//
// Every read and write has a deadline (ReadTimeout unless a method says otherwise), so a test
// that waits for a frame that never comes fails instead of hanging. Import it only from
// _test.go files.
package wiretest
