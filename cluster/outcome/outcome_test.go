package outcome

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/latchd/latch/wire"
)

// Every outcome has a wire reason and an HTTP status, and the two say the same thing:
// retry (unavailable, 503), do not retry blindly (indeterminate, 504), or a bug / bad input.
func TestTablesCoverEveryOutcome(t *testing.T) {
	wantReason := map[Kind]wire.Reason{
		NotApplied: wire.ReasonUnavailable, MaybeApplied: wire.ReasonIndeterminate,
		NotLeader: wire.ReasonUnavailable, Rejected: wire.ReasonInternal,
	}
	wantStatus := map[Kind]int{
		NotApplied: http.StatusServiceUnavailable, MaybeApplied: http.StatusGatewayTimeout,
		NotLeader: http.StatusServiceUnavailable, Rejected: http.StatusBadRequest,
	}
	if len(reasons) != len(Kinds) || len(statuses) != len(Kinds) {
		t.Fatalf("%d reasons and %d statuses for %d outcomes", len(reasons), len(statuses), len(Kinds))
	}
	for _, k := range Kinds {
		err := fmt.Errorf("wrapped: %w", New(k, errors.New("cause")))
		if got := Reason(err); got != wantReason[k] || !wire.validReason([]byte(got)) {
			t.Errorf("%v: reason %q, want %q", k, got, wantReason[k])
		}
		if got := HTTPStatus(err); got != wantStatus[k] {
			t.Errorf("%v: status %d, want %d", k, got, wantStatus[k])
		}
		if got, ok := Of(err); !ok || got != k {
			t.Errorf("Of(%v) = %v, %v", err, got, ok)
		}
	}
	plain := errors.New("no outcome")
	if Reason(plain) != wire.ReasonUnavailable || HTTPStatus(plain) != http.StatusServiceUnavailable {
		t.Errorf("an error without an outcome: %q, %d; want unavailable, 503", Reason(plain), HTTPStatus(plain))
	}
}

// errors.Is: an outcome matches itself; not leader and rejected are also not applied; maybe
// applied is never not applied, and the other way round.
func TestIs(t *testing.T) {
	for _, k := range Kinds {
		for _, target := range Kinds {
			want := k == target || target == NotApplied && (k == NotLeader || k == Rejected)
			for _, err := range []error{k, New(k, nil), fmt.Errorf("x: %w", New(k, errors.New("y")))} {
				if got := errors.Is(err, target); got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, target, got, want)
				}
			}
		}
	}
	if k, _ := Of(fmt.Errorf("a: %w", ErrNotLeader)); k != NotLeader {
		t.Errorf("Of a wrapped bare NotLeader = %v", k)
	}
}

// The message is the outcome once, then the cause: no chain of the same words.
func TestMessageSaysTheOutcomeOnce(t *testing.T) {
	err := fmt.Errorf("raftnode: restore: %w", New(MaybeApplied, errors.New("raft did not answer within ApplyTimeout")))
	want := "raftnode: restore: outcome unknown (it may or may not have been applied): raft did not answer within ApplyTimeout"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	for _, k := range Kinds {
		if msg := New(k, errors.New("because")).Error(); strings.Count(msg, k.Error()) != 1 {
			t.Errorf("%q says its outcome more than once", msg)
		}
	}
}
