// Package outcome is the one vocabulary for what became of a command that did not succeed:
// it was not applied, it may or may not have been applied, it was not applied because this
// node does not lead, or it was rejected. Outcomes start in cluster/raftnode (which
// classifies every raft error into one), travel through package cluster and
// cluster/member unchanged, and end as a wire reason (Reason) or an HTTP status
// (HTTPStatus): one table each, here.
//
// It imports only the standard library and package wire, so that every layer can use it;
// it must never grow a dependency on the packages that use it.
package outcome

import (
	"errors"
	"net/http"

	"github.com/latchd/latch/wire"
)

// Kind is one outcome. A Kind is an error, for errors.Is: an error of kind NotLeader or
// Rejected also Is NotApplied, since neither reached the log.
type Kind uint8

const (
	// NotApplied: the command never reached the log, on any node, and never will. Nothing
	// changed; the caller may retry, here or elsewhere.
	NotApplied Kind = iota + 1
	// MaybeApplied: the command reached the log, or may have, and its outcome is unknown: it
	// may be applied already, later by another leader, or never. A retry could apply it
	// twice: the caller answers "indeterminate".
	MaybeApplied
	// NotLeader: not applied, because this node is not the established leader. Send the
	// command to the leader.
	NotLeader
	// Rejected: not applied, because the command itself cannot be carried out (bad input);
	// retrying it unchanged fails the same way.
	Rejected
)

// Kinds lists every outcome, for tables and their tests.
var Kinds = []Kind{NotApplied, MaybeApplied, NotLeader, Rejected}

// The outcomes as errors, for errors.Is and for wrapping with %w.
var (
	ErrNotApplied   error = NotApplied
	ErrMaybeApplied error = MaybeApplied
	ErrNotLeader    error = NotLeader
	ErrRejected     error = Rejected
)

// Error says the outcome; it is the start of an error message.
func (k Kind) Error() string {
	switch k {
	case NotApplied, NotLeader:
		return "not applied"
	case MaybeApplied:
		return "outcome unknown (it may or may not have been applied)"
	case Rejected:
		return "rejected"
	}
	return "unknown outcome"
}

// Is makes an error of kind NotLeader or Rejected match NotApplied too.
func (k Kind) Is(target error) bool {
	t, ok := target.(Kind)
	return ok && (t == k || t == NotApplied && (k == NotLeader || k == Rejected))
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
// wins: an error that is NotLeader is reported as NotLeader, not NotApplied.
func Of(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	for _, k := range []Kind{MaybeApplied, NotLeader, Rejected, NotApplied} {
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

// reasons is the wire reason of each outcome. A rejected command is one the node should
// never have proposed: a bug, so internal.
var reasons = map[Kind]wire.Reason{
	NotApplied:   wire.ReasonUnavailable,
	MaybeApplied: wire.ReasonIndeterminate,
	NotLeader:    wire.ReasonUnavailable,
	Rejected:     wire.ReasonInternal,
}

// Reason is the wire reason of err's outcome; an error that carries none is unavailable
// (it was not applied).
func Reason(err error) wire.Reason { return reasons[kindOr(err, NotApplied)] }

// StatusMaybeApplied is the HTTP status of a change whose outcome is unknown (504: the
// node could not learn it in time).
const StatusMaybeApplied = http.StatusGatewayTimeout

// statuses is the HTTP status of each outcome.
var statuses = map[Kind]int{
	NotApplied:   http.StatusServiceUnavailable,
	MaybeApplied: StatusMaybeApplied,
	NotLeader:    http.StatusServiceUnavailable,
	Rejected:     http.StatusBadRequest,
}

// HTTPStatus is the HTTP status of err's outcome; an error that carries none is 503 (not
// applied: try again).
func HTTPStatus(err error) int { return statuses[kindOr(err, NotApplied)] }
