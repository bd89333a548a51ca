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
	Owner uint64 // A, R, P: correlation id, 1..2^64-1
	Wait  uint8  // A: seconds to wait for the key, 0..MaxWait
	Lease uint16 // A: seconds, MinLease..MaxLease
	Token uint64 // R: the token to release
	// Key is the lock name (A, R). After Decode it aliases the decoder's
	// buffer and is valid only until the next Decode call; copy it to keep it.
	Key   []byte
	Hello Hello           // H
	Proof [ProofSize]byte // V
}

// Check returns the reason the server answers a structurally sound request
// with, or "" when r is valid. When several fields are wrong, the first of
// bad_owner, bad_key, bad_range is returned (section 5). P checks the owner;
// R the owner and the key; A the owner, the key and the lease. H and V have
// nothing to check here (their rules depend on the handshake state), and an
// op that is not a request gives bad_request.
func (r *Request) Check() Reason {
	switch r.Op {
	case OpHello, OpProof:
		return ""
	case OpPing, OpRelease, OpAcquire:
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
	if r.Op == OpAcquire && (r.Lease < MinLease || r.Lease > MaxLease) {
		return ReasonBadRange
	}
	return ""
}

// Response is one server-to-client frame. Only the fields of its Op are
// meaningful; the others are zero after Decode and ignored by AppendResponse.
type Response struct {
	Op     Op
	Owner  uint64          // every op but H and V: the request's owner, or 0
	Token  uint64          // A: the fencing token granted
	Reason Reason          // E
	Hello  Hello           // H
	Proof  [ProofSize]byte // V
}
