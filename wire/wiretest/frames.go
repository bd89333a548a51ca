package wiretest

import (
	"encoding/binary"

	"github.com/latchd/latch/wire"
)

// Request frames (docs/protocol.md section 3.1), built byte by byte. They write what they are
// given: a key may be empty, too long, not UTF-8 or hold whitespace, so that tests can send
// frames the server must refuse. A key holding LF ends the frame early, as it would on the
// wire.

// Acquire is the A request: owner u64, wait u8, lease u16, key, LF.
func Acquire(owner uint64, wait uint8, lease uint16, key string) []byte {
	b := make([]byte, 0, 1+11+len(key)+1)
	b = append(b, byte(wire.OpAcquire))
	b = binary.BigEndian.AppendUint64(b, owner)
	b = append(b, wait)
	b = binary.BigEndian.AppendUint16(b, lease)
	b = append(b, key...)
	return append(b, '\n')
}

// Release is the R request: owner u64, token u64, key, LF.
func Release(owner, token uint64, key string) []byte {
	b := make([]byte, 0, 1+16+len(key)+1)
	b = append(b, byte(wire.OpRelease))
	b = binary.BigEndian.AppendUint64(b, owner)
	b = binary.BigEndian.AppendUint64(b, token)
	b = append(b, key...)
	return append(b, '\n')
}

// Extend is revision 2's L request: owner u64, token u64, lease u16, key, LF. Only a
// connection whose hellos negotiated wire.FlagLeases carries it.
func Extend(owner, token uint64, lease uint16, key string) []byte {
	b := make([]byte, 0, 1+18+len(key)+1)
	b = append(b, byte(wire.OpExtend))
	b = binary.BigEndian.AppendUint64(b, owner)
	b = binary.BigEndian.AppendUint64(b, token)
	b = binary.BigEndian.AppendUint16(b, lease)
	b = append(b, key...)
	return append(b, '\n')
}

// Ping is the P request: owner u64, LF.
func Ping(owner uint64) []byte {
	b := make([]byte, 0, 1+8+1)
	b = append(b, byte(wire.OpPing))
	b = binary.BigEndian.AppendUint64(b, owner)
	return append(b, '\n')
}

// Hello is the H frame: version u8, flags u8, nonce [32], LF.
func Hello(version, flags uint8, nonce [wire.NonceSize]byte) []byte {
	b := make([]byte, 0, 1+2+wire.NonceSize+1)
	b = append(b, byte(wire.OpHello), version, flags)
	b = append(b, nonce[:]...)
	return append(b, '\n')
}

// Proof is the V frame: HMAC-SHA256 [32], LF.
func Proof(p [wire.ProofSize]byte) []byte {
	b := make([]byte, 0, 1+wire.ProofSize+1)
	b = append(b, byte(wire.OpProof))
	b = append(b, p[:]...)
	return append(b, '\n')
}

// Response frames (section 3.2), for tests that check the server's bytes exactly.

// Acquired is the A response: owner u64, token u64, LF.
func Acquired(owner, token uint64) []byte {
	b := []byte{byte(wire.OpAcquire)}
	b = binary.BigEndian.AppendUint64(b, owner)
	b = binary.BigEndian.AppendUint64(b, token)
	return append(b, '\n')
}

// Short is one of the responses whose header is the owner alone: T, B, R, N or P.
func Short(op wire.Op, owner uint64) []byte {
	b := []byte{byte(op)}
	b = binary.BigEndian.AppendUint64(b, owner)
	return append(b, '\n')
}

// Error is the E response: owner u64, reason, LF.
func Error(owner uint64, reason wire.Reason) []byte {
	b := []byte{byte(wire.OpError)}
	b = binary.BigEndian.AppendUint64(b, owner)
	b = append(b, reason...)
	return append(b, '\n')
}

// Concat joins frames into one buffer, to be written at once (pipelined).
func Concat(frames ...[]byte) []byte {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	b := make([]byte, 0, n)
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}
