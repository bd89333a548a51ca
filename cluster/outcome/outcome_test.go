package outcome

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/latchd/latch/wire"
)

// Every outcome has a wire reason and an HTTP status, and the two say the same thing:
// retry (unavailable, 503), do not retry blindly (indeterminate, 504), or a bug / bad input.
func TestTablesCoverEveryOutcome(t *testing.T) {
	wantReason := map[Kind]wire.Reason{
		Unavailable: wire.ReasonUnavailable, Indeterminate: wire.ReasonIndeterminate,
		NotLeader: wire.ReasonUnavailable, Refused: wire.ReasonInternal,
	}
	wantStatus := map[Kind]int{
		Unavailable: http.StatusServiceUnavailable, Indeterminate: http.StatusGatewayTimeout,
		NotLeader: http.StatusServiceUnavailable, Refused: http.StatusBadRequest,
	}
	if len(reasons) != len(Kinds) || len(statuses) != len(Kinds) {
		t.Fatalf("%d reasons and %d statuses for %d outcomes", len(reasons), len(statuses), len(Kinds))
	}
	for _, k := range Kinds {
		err := fmt.Errorf("wrapped: %w", New(k, errors.New("cause")))
		if got := Reason(err); got != wantReason[k] || !slices.Contains(wire.Reasons, got) {
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

// errors.Is: an outcome matches itself, and not leader is also unavailable; no other kind
// matches another (refused is not unavailable: a retry fails the same way).
func TestIs(t *testing.T) {
	for _, k := range Kinds {
		for _, target := range Kinds {
			want := k == target || target == Unavailable && k == NotLeader
			for _, err := range []error{k, New(k, nil), fmt.Errorf("x: %w", New(k, errors.New("y")))} {
				if got := errors.Is(err, target); got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, target, got, want)
				}
			}
		}
	}
	if k, _ := Of(fmt.Errorf("a: %w", NotLeader)); k != NotLeader {
		t.Errorf("Of a wrapped bare NotLeader = %v", k)
	}
}

// The message is the outcome once, then the cause: no chain of the same words.
func TestMessageSaysTheOutcomeOnce(t *testing.T) {
	err := fmt.Errorf("raftnode: restore: %w", New(Indeterminate, errors.New("raft did not answer within ApplyTimeout")))
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

// wordRE is the form of the wire's words (reasons), which the names of the kinds share.
var wordRE = regexp.MustCompile(`^[a-z_]{1,32}$`)

// A kind's name goes from one node to another and back unchanged; a name this build does not
// know is no kind, and no error.
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds {
		b, err := k.MarshalText()
		if err != nil || seen[string(b)] || !wordRE.Match(b) {
			t.Fatalf("%v: name %q, %v (seen before: %v)", k, b, err, seen[string(b)])
		}
		seen[string(b)] = true
		var back Kind
		if err := back.UnmarshalText(b); err != nil || back != k {
			t.Errorf("%q read back as %v, %v", b, back, err)
		}
	}
	for k, want := range map[Kind]string{Unavailable: "unavailable", Indeterminate: "indeterminate"} {
		if b, _ := k.MarshalText(); string(b) != want || string(b) != string(reasons[k]) {
			t.Errorf("%v is named %q, want its wire reason %q", k, b, want)
		}
	}
	back := Refused
	if err := back.UnmarshalText([]byte("from_a_later_latch")); err != nil || back != 0 {
		t.Errorf("an unknown name read as %v, %v; want no kind and no error", back, err)
	}
	if _, err := Kind(0).MarshalText(); err == nil {
		t.Error("no kind has a name")
	}
}
