// Package wire is the latch/1 wire protocol: frames to bytes and back, the
// key rules, the error reasons, the handshake proofs and the protocol
// constants. docs/protocol.md (sections 3, 4, 5 and 8) is the contract; this
// package follows it to the byte. It also holds the codec of revision 2
// (docs/protocol.md: grant age and extend), which exists only on a
// connection whose hellos negotiated FlagLeases.
//
// Both ends use it: the server decodes requests and encodes responses, the
// official client encodes requests and decodes responses.
//
// # What it must never do
//
// wire is pure: no network, no goroutines, no clocks, no Raft, no lock table
// and no connection or server state beyond the bytes of one partial frame in
// a Decoder. Timeouts (ProgressTimeout, HandshakeTimeout) are named here but
// enforced by the session code; the handshake order (H, then V when
// FlagAuthRequired is set, then requests) is the session's job too, and so
// is turning a revision on: the session computes the flags with EchoFlags or
// AcceptFlags and hands them to its Decoder with SetFlags between frames. It
// imports the standard library only and no other latch package.
//
// # Frames
//
//	+----+------------------------------+----------------+----+
//	| op | fixed header (length by op)  | tail           | LF |
//	+----+------------------------------+----------------+----+
//	  1    binary, big-endian, MAY hold   key (req A, R)   0x0A
//	       0x0A: read by length           reason (resp E)
//	                                      else empty
//
//	request  A  owner u64 | wait u8 | lease u16   (11)  key
//	request  R  owner u64 | token u64             (16)  key
//	request  P  owner u64                          (8)
//	both     H  version u8 | flags u8 | nonce[32] (34)
//	both     V  HMAC-SHA256 proof[32]             (32)
//	response A  owner u64 | token u64             (16)
//	response T B R N P  owner u64                  (8)
//	response E  owner u64                          (8)  reason [a-z_]{1,32}
//
// With FlagLeases (revision 2) a connection also carries
//
//	request  L  owner u64 | token u64 | lease u16  (18)  key   extend
//	response G  owner u64 | token u64 | age u32    (20)        granted, age in ms
//	response L  owner u64                          (8)         extended
//
// and no response A: every grant is a G. The longest valid frame is then 148
// bytes (L with a 128-byte key) instead of 146 (R); MaxFrame stays 192. A
// Decoder without the flag reports L and G as unknown ops, as latch/1 does.
//
// A frame longer than MaxFrame (192) bytes is structurally invalid, as are an
// unknown op, bytes in an empty tail and a malformed reason; the Decoder
// reports them as a *FrameError and the connection must close. A key that
// breaks section 4 (empty, over 128 bytes, not UTF-8, whitespace) is not
// structural: the frame decodes and Request.Check reports bad_key.
//
// Decoding and encoding do not allocate on the hot path: a Decoder copies
// the bytes of one frame into a fixed MaxFrame buffer, and the Append
// functions write into the caller's slice.
package wire
