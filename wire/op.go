package wire

import "fmt"

// Op is the first byte of a frame. The same byte can name a request and a
// response (A is acquire and acquired, R is release and released, P is ping
// and pong, H and V are the handshake in both directions).
type Op byte

// Ops of latch/1 (section 3).
const (
	OpAcquire Op = 'A' // request acquire; response acquired
	OpRelease Op = 'R' // request release; response released
	OpPing    Op = 'P' // request ping; response pong
	OpHello   Op = 'H' // handshake hello, both directions
	OpProof   Op = 'V' // handshake proof, both directions
	OpTimeout Op = 'T' // response only: not acquired, wait ran out
	OpBusy    Op = 'B' // response only: not acquired, admission closed
	OpNotHeld Op = 'N' // response only: nothing released
	OpError   Op = 'E' // response only: error with a reason
)

// Ops of revision 2 (FlagLeases; docs/protocol.md section 3.5). They exist only
// on a connection whose hellos negotiated FlagLeases: a Decoder without that flag (see
// SetFlags) reports them as ErrUnknownOp, as latch/1 always has.
const (
	OpGranted Op = 'G' // response only: acquired, with the age of the request
	OpExtend  Op = 'L' // request extend the lease; response extended
)

// String returns the op's letter, or its byte value in hex when it is not an
// op of latch/1 or of revision 2.
func (o Op) String() string {
	switch o {
	case OpAcquire, OpRelease, OpPing, OpHello, OpProof,
		OpTimeout, OpBusy, OpNotHeld, OpError, OpGranted, OpExtend:
		return string(rune(o))
	}
	return fmt.Sprintf("Op(0x%02x)", byte(o))
}

// tailKind says what may stand between an op's fixed header and its LF.
type tailKind uint8

const (
	tailNone   tailKind = iota // LF right after the header
	tailKey                    // a key (request A and R)
	tailReason                 // an E reason (response E)
)

// layout is the shape of one op in one direction. hdr == 0 marks an op that
// does not exist in that direction: every real op has a header.
type layout struct {
	hdr  uint8 // fixed header length after the op byte
	tail tailKind
}

// requestLayouts and responseLayouts are the tables of sections 3.1 and 3.2,
// indexed by op byte: the ops of a latch/1 connection.
var (
	requestLayouts = [256]layout{
		OpAcquire: {11, tailKey},
		OpRelease: {16, tailKey},
		OpPing:    {8, tailNone},
		OpHello:   {2 + NonceSize, tailNone},
		OpProof:   {ProofSize, tailNone},
	}
	responseLayouts = [256]layout{
		OpAcquire: {16, tailNone},
		OpTimeout: {8, tailNone},
		OpBusy:    {8, tailNone},
		OpRelease: {8, tailNone},
		OpNotHeld: {8, tailNone},
		OpPing:    {8, tailNone},
		OpError:   {8, tailReason},
		OpHello:   {2 + NonceSize, tailNone},
		OpProof:   {ProofSize, tailNone},
	}
)

// leasesRequestLayouts and leasesResponseLayouts are the tables of a connection with
// FlagLeases (docs/protocol.md section 3.5): latch/1's, plus request L (extend),
// plus responses G (granted, with age) and L (extended), minus response A, since every
// grant on such a connection is a G.
var (
	leasesRequestLayouts = func() [256]layout {
		t := requestLayouts
		t[OpExtend] = layout{18, tailKey}
		return t
	}()
	leasesResponseLayouts = func() [256]layout {
		t := responseLayouts
		t[OpAcquire] = layout{}
		t[OpGranted] = layout{20, tailNone}
		t[OpExtend] = layout{8, tailNone}
		return t
	}()
)

// Answers reports whether a response with op resp answers a request with op req (section
// 3.2): A, T or B answer an acquire; R or N a release; P a ping; E answers every request.
// Revision 2 adds G, which answers an acquire, and L, which answers an extend, as N does
// too. Which ops a connection carries at all is the Decoder's business (SetFlags), so the
// rule holds on both kinds of connection. Both the client and a follower that forwards
// requests match answers by this one rule.
func Answers(req, resp Op) bool {
	switch resp {
	case OpError:
		return req == OpAcquire || req == OpRelease || req == OpPing || req == OpExtend
	case OpAcquire, OpTimeout, OpBusy, OpGranted:
		return req == OpAcquire
	case OpRelease:
		return req == OpRelease
	case OpNotHeld:
		return req == OpRelease || req == OpExtend
	case OpExtend:
		return req == OpExtend
	case OpPing:
		return req == OpPing
	}
	return false
}
