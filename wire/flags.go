package wire

import (
	"errors"
	"time"
)

// Hello flags (docs/protocol.md section 8). Bit 0,
// FlagAuthRequired, is a demand that only a server makes. Every other defined bit is an
// offer: a client sets it to offer a revision of the protocol, a server that implements
// the revision echoes it, and the revision is in force on the connection only when both
// hellos set it. Nothing else about the connection changes: a hello whose flags are 0 or
// FlagAuthRequired is latch/1, byte for byte.
//
// The rules, so that old and new peers meet as latch/1:
//   - A server ignores every client bit it does not implement (latch/1 servers have never
//     read the client's flags), and echoes only bits the client set.
//   - A client ignores server bits that no revision it knows defines, so that a later
//     server may announce something an older client can safely overlook. An offer bit it
//     knows and did not set breaks the handshake (ErrFlagNotOffered).
//   - The flags are not covered by the V proofs (section 8): only TLS protects them.

// OfferFlags are the hello bits that are offers, as opposed to FlagAuthRequired.
const OfferFlags = FlagLeases

// ErrFlagNotOffered is AcceptFlags' error for a server hello that echoes an offer the
// client did not make.
var ErrFlagNotOffered = errors.New("wire: the server's hello echoes a protocol revision this client did not offer; it breaks the handshake: drop the connection")

// EchoFlags is the server's side of the negotiation: the offer bits it sets in its hello,
// which are the revisions in force on the connection. client is the client hello's flags,
// supported the offer bits the server implements (FlagLeases once it serves revision 2, 0
// before). Client bits outside supported are ignored, FlagAuthRequired among them. The
// server ORs in FlagAuthRequired itself when it asks for a proof.
func EchoFlags(client, supported uint8) uint8 { return client & supported & OfferFlags }

// AcceptFlags is the client's side: the revisions in force on the connection, given the
// flags of the hello it sent (offered) and of the server's hello. Bit 0 is the caller's to
// read (FlagAuthRequired), bits no revision defines are ignored, and a known offer bit the
// client did not set is ErrFlagNotOffered: the client must drop the connection.
func AcceptFlags(offered, server uint8) (uint8, error) {
	echo := server & OfferFlags
	if echo&^offered != 0 {
		return 0, ErrFlagNotOffered
	}
	return echo, nil
}

// AgeMillis is the age of a G grant whose request the server read waited before its lease
// started: waited in whole milliseconds, rounded down, 0 when waited is not positive, and
// MaxAge when it is longer. Every case gives less than the wait or exactly it, never more,
// so that a client may add the age to the moment it wrote the request.
func AgeMillis(waited time.Duration) uint32 {
	switch ms := waited / time.Millisecond; {
	case ms <= 0:
		return 0
	case ms >= MaxAge:
		return MaxAge
	default:
		return uint32(ms)
	}
}
