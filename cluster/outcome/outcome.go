package outcome

import (
	"errors"
	"net/http"

	"github.com/latchd/latch/wire"
)

// Kind is one outcome (the table in doc.go). A Kind is an error, for errors.Is and for
// wrapping with %w: an error of kind NotLeader also Is Unavailable.
type Kind uint8

// The outcomes. Their numbers are not carried anywhere; their names are (MarshalText).
const (
	// Unavailable: definitely not applied; the caller may retry, here or elsewhere.
	Unavailable Kind = iota + 1
	// Indeterminate: it may or may not have been applied; a blind retry could apply it twice.
	Indeterminate
	// NotLeader: not applied (Unavailable), because this node is not the established leader.
	NotLeader
	// Refused: not applied, because the command itself cannot be carried out.
	Refused
)

// Kinds lists every outcome, for tables and their tests.
var Kinds = []Kind{Unavailable, Indeterminate, NotLeader, Refused}

// Error says the outcome; it is the start of an error message.
func (k Kind) Error() string {
	switch k {
	case Unavailable, NotLeader:
		return "not applied"
	case Indeterminate:
		return "outcome unknown (it may or may not have been applied)"
	case Refused:
		return "refused (not applied)"
	}
	return "unknown outcome"
}

// Is makes an error of kind NotLeader match Unavailable too.
func (k Kind) Is(target error) bool {
	t, ok := target.(Kind)
	return ok && (t == k || t == Unavailable && k == NotLeader)
}

// names are the kinds as text, where one node tells another (cluster/admin's channel).
var names = map[Kind]string{
	Unavailable:   "unavailable",
	Indeterminate: "indeterminate",
	NotLeader:     "not_leader",
	Refused:       "refused",
}

// MarshalText is k's name: the wire reason where it has one of its own.
func (k Kind) MarshalText() ([]byte, error) {
	if n, ok := names[k]; ok {
		return []byte(n), nil
	}
	return nil, errors.New("outcome: no name for kind")
}

// UnmarshalText reads a name MarshalText wrote. A name it does not know (from a later latch)
// is no kind (0) and no error, so that the rest of what carries it still counts.
func (k *Kind) UnmarshalText(b []byte) error {
	*k = 0
	for kind, n := range names {
		if n == string(b) {
			*k = kind
		}
	}
	return nil
}

// Error is an outcome and its cause. Its message is one sentence: the outcome, then why
// ("not applied: this node is not the leader (leader: n1 at 10.0.0.1:7401)").
type Error struct {
	Kind  Kind
	Cause error // may be nil
}

// New returns an error of kind k caused by cause.
func New(k Kind, cause error) error { return &Error{Kind: k, Cause: cause} }

func (e *Error) Error() string {
	if e.Cause == nil {
		return e.Kind.Error()
	}
	return e.Kind.Error() + ": " + e.Cause.Error()
}

func (e *Error) Unwrap() error { return e.Cause }

// Is matches the error's kind (see Kind.Is).
func (e *Error) Is(target error) bool { return e.Kind.Is(target) }

// Of returns the outcome err carries, and false if it carries none. The most specific kind
// wins: an error that is NotLeader is reported as NotLeader, not Unavailable.
func Of(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	for _, k := range []Kind{Indeterminate, NotLeader, Refused, Unavailable} {
		if errors.Is(err, k) {
			return k, true
		}
	}
	return 0, false
}

// kindOr is err's outcome, or def when it carries none.
func kindOr(err error, def Kind) Kind {
	if k, ok := Of(err); ok {
		return k
	}
	return def
}

// reasons is the wire reason of each outcome (doc.go's table, column "wire reason").
var reasons = map[Kind]wire.Reason{
	Unavailable:   wire.ReasonUnavailable,
	Indeterminate: wire.ReasonIndeterminate,
	NotLeader:     wire.ReasonUnavailable,
	Refused:       wire.ReasonInternal,
}

// Reason is the wire reason of err's outcome; an error that carries none is unavailable
// (it was not applied).
func Reason(err error) wire.Reason { return reasons[kindOr(err, Unavailable)] }

// StatusIndeterminate is the HTTP status of a change whose outcome is unknown (504: the
// node could not learn it in time).
const StatusIndeterminate = http.StatusGatewayTimeout

// statuses is the HTTP status of each outcome (doc.go's table, column "HTTP status").
var statuses = map[Kind]int{
	Unavailable:   http.StatusServiceUnavailable,
	Indeterminate: StatusIndeterminate,
	NotLeader:     http.StatusServiceUnavailable,
	Refused:       http.StatusBadRequest,
}

// HTTPStatus is the HTTP status of err's outcome; an error that carries none is 503 (not
// applied: try again).
func HTTPStatus(err error) int { return statuses[kindOr(err, Unavailable)] }
