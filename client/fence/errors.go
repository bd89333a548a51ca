package fence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxToken is the largest token latch issues: 2^63-1, so that every token fits a signed
// 64-bit (BIGINT) column. latch never issues 0.
const MaxToken uint64 = 1<<63 - 1

// Errors of this package, each defined once; the functions return them wrapped with detail,
// so test them with errors.Is.
var (
	// ErrStale: the write was refused because a higher token has been accepted for the
	// resource: a newer holder exists, and this one must stop. Nothing was written and the
	// mark was not changed. The error is a *StaleError, which says which token was seen.
	ErrStale = errors.New("fence: stale token: a newer holder has written this resource; stop, and do not retry with this token")
	// ErrInvalidToken: the token is 0, above MaxToken, or not a decimal number. Nothing
	// was checked or written.
	ErrInvalidToken = errors.New("fence: invalid token: want a decimal number in 1..9223372036854775807 (2^63-1), as latch issues them")
)

// StaleError is the refusal of a stale token. errors.Is(err, ErrStale) holds for it.
type StaleError struct {
	// Resource is the resource the write was for.
	Resource string
	// Token is the refused token.
	Token uint64
	// Seen is the highest token the resource has accepted, above Token; or, when Floor is
	// set, the floor of a Guard that no longer remembers this resource.
	Seen uint64
	// Floor: the Guard had forgotten the resource (its memory is bounded) and refused the
	// token by its floor, the highest mark among the resources it forgot.
	Floor bool
}

// Error says which token was refused and which one the resource has seen.
func (e *StaleError) Error() string {
	if e.Floor {
		return fmt.Sprintf("fence: token %d for resource %q is refused: it is below %d, the guard's floor for resources it no longer remembers; a newer holder may exist, stop", e.Token, e.Resource, e.Seen)
	}
	return fmt.Sprintf("fence: token %d for resource %q is stale: token %d has been accepted; a newer holder exists, stop", e.Token, e.Resource, e.Seen)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ParseToken reads a token as latch prints it (LATCH_TOKEN, `latch acquire`): a decimal
// number in 1..MaxToken, surrounding spaces allowed. Anything else is ErrInvalidToken.
func ParseToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w (got %q)", ErrInvalidToken, s)
	}
	return t, CheckToken(t)
}

// CheckToken returns ErrInvalidToken for 0 and for tokens above MaxToken, which latch
// never issues; nil otherwise.
func CheckToken(t uint64) error {
	if t == 0 || t > MaxToken {
		return fmt.Errorf("%w (got %d)", ErrInvalidToken, t)
	}
	return nil
}
