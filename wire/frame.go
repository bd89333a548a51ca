package wire

// Hello is the fixed header of an H frame, in either direction.
type Hello struct {
	Version uint8           // protocol version; Version for latch/1
	Flags   uint8           // server hello: FlagAuthRequired; client hello: 0
	Nonce   [NonceSize]byte // fresh from NewNonce
}

// Request is one client-to-server frame. Only the fields of its Op are
// meaningful; the others are zero after Decode and ignored by AppendRequest.
type Request struct {
	Op    Op
	Owner uint64 // A, R, P, L: correlation id, 1..2^64-1
	Wait  uint8  // A: seconds to wait for the key, 0..MaxWait
	Lease uint16 // A: seconds, MinLease..MaxLease; L: the new lease, same range
	Token uint64 // R: the token to release; L: the token whose lease to extend
	// Key is the lock name (A, R, L). After Decode it aliases the decoder's
	// buffer and is valid only until the next Decode call; copy it to keep it.
	Key   []byte
	Hello Hello           // H
	Proof [ProofSize]byte // V
}

// Check returns the reason the server answers a structurally sound request
// with, or "" when r is valid. When several fields are wrong, the first of
// bad_owner, bad_key, bad_range is returned (section 5). P checks the owner;
// R the owner and the key; A and L (revision 2) the owner, the key and the
// lease. H and V have nothing to check here (their rules depend on the
// handshake state), and an op that is not a request gives bad_request.
func (r *Request) Check() Reason {
	switch r.Op {
	case OpHello, OpProof:
		return ""
	case OpPing, OpRelease, OpAcquire, OpExtend:
	default:
		return ReasonBadRequest
	}
	if r.Owner == 0 {
		return ReasonBadOwner
	}
	if r.Op == OpPing {
		return ""
	}
	if CheckKey(r.Key) != nil {
		return ReasonBadKey
	}
	if (r.Op == OpAcquire || r.Op == OpExtend) && (r.Lease < MinLease || r.Lease > MaxLease) {
		return ReasonBadRange
	}
	return ""
}

// Response is one server-to-client frame. Only the fields of its Op are
// meaningful; the others are zero after Decode and ignored by AppendResponse.
type Response struct {
	Op    Op
	Owner uint64 // every op but H and V: the request's owner, or 0
	Token uint64 // A, G: the fencing token granted
	// Age (G) is how long the request waited on the server, from the read of
	// its frame to the start of its lease, in milliseconds rounded down
	// (AgeMillis): never more than it waited.
	Age    uint32
	Reason Reason          // E
	Hello  Hello           // H
	Proof  [ProofSize]byte // V
}
