package wire

// Reason is the reason carried by an E response (section 5). Known reasons
// are the constants below; a peer may send others that are still valid
// ([a-z_], 1..MaxReasonLen bytes).
type Reason string

// Reasons of latch/1 (section 5).
const (
	ReasonBadRequest     Reason = "bad_request"     // structural fault; connection closed
	ReasonBadKey         Reason = "bad_key"         // key fails section 4
	ReasonBadOwner       Reason = "bad_owner"       // owner 0
	ReasonBadRange       Reason = "bad_range"       // lease out of 1..3600
	ReasonAuthRequired   Reason = "auth_required"   // request before the handshake finished; closed
	ReasonAuthFailed     Reason = "auth_failed"     // wrong proof; closed
	ReasonBadVersion     Reason = "bad_version"     // unsupported hello version; closed
	ReasonUnavailable    Reason = "unavailable"     // definitely not applied; safe to retry elsewhere
	ReasonIndeterminate  Reason = "indeterminate"   // may or may not have been applied
	ReasonTokenExhausted Reason = "token_exhausted" // token counter at MaxToken
	ReasonInternal       Reason = "internal"        // a bug; not applied
)

// ReasonUnsupported is the reason of revision 2 (docs/protocol.md section 5):
// the node, or the leader it forwards to, does not implement extend. It is definite (the
// lease was not extended) and answers only an L, only on a connection with FlagLeases.
// The connection stays.
const ReasonUnsupported Reason = "unsupported"

// Reasons lists every reason of latch/1 in the order of the section 5 table.
// ReasonUnsupported, revision 2's, is not among them: no latch/1 connection carries it.
var Reasons = append([]Reason(nil), reasons[:]...)

// reasons is Reasons, out of the reach of callers that might change the exported slice.
var reasons = [...]Reason{
	ReasonBadRequest,
	ReasonBadKey,
	ReasonBadOwner,
	ReasonBadRange,
	ReasonAuthRequired,
	ReasonAuthFailed,
	ReasonBadVersion,
	ReasonUnavailable,
	ReasonIndeterminate,
	ReasonTokenExhausted,
	ReasonInternal,
}

// Closes reports whether the server closes the connection after sending r.
func (r Reason) Closes() bool {
	switch r {
	case ReasonBadRequest, ReasonAuthRequired, ReasonAuthFailed, ReasonBadVersion:
		return true
	}
	return false
}

// validReason reports whether b is a well-formed reason: 1..MaxReasonLen
// bytes of [a-z_].
func validReason(b []byte) bool {
	if len(b) == 0 || len(b) > MaxReasonLen {
		return false
	}
	for _, c := range b {
		if !reasonByte(c) {
			return false
		}
	}
	return true
}

func reasonByte(c byte) bool { return c >= 'a' && c <= 'z' || c == '_' }

// knownReason returns the constant equal to b without allocating, or "" and
// false when b is not a known reason.
func knownReason(b []byte) (Reason, bool) {
	for _, r := range reasons {
		if string(b) == string(r) {
			return r, true
		}
	}
	if string(b) == string(ReasonUnsupported) {
		return ReasonUnsupported, true
	}
	return "", false
}
