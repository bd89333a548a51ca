package supervise

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Every event latch run reports has its line, naming the key (or the command) and the time;
// EventExtended has none.
func TestSubjectText(t *testing.T) {
	s := Subject{Key: "k", Token: 7, Command: "cmd", MaxHold: time.Minute}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Event{Kind: EventTerm, At: at}, "lease of k ends at 2026-01-02T03:04:05Z; sending SIGTERM"},
		{Event{Kind: EventTerm, At: at, Held: true}, "--max-hold 1m0s of k ends at 2026-01-02T03:04:05Z; sending SIGTERM"},
		{Event{Kind: EventKill, Held: true}, "--max-hold of k is ending; sending SIGKILL"},
		{Event{Kind: EventKill}, "lease of k is ending; sending SIGKILL"},
		{Event{Kind: EventEscalate}, "a second signal"},
		{Event{Kind: EventLost}, "token 7 no longer holds k"},
		{Event{Kind: EventUnsupported, At: at}, "cmd is stopped as the lease of k ends at 2026-01-02T03:04:05Z"},
		{Event{Kind: EventExtendFailed, At: at, Err: errors.New("boom")}, "extending the lease of k failed: boom"},
		{Event{Kind: EventPaused, At: at}, "cmd is stopped; its lease is not extended"},
		{Event{Kind: EventOutlived, Pids: []int{11, 12}}, "killed 2 processes that outlived cmd (pids 11, 12)"},
		{Event{Kind: EventOutlived, Pids: []int{11}, Err: errors.New("stuck")}, "killed 1 process that outlived cmd (pids 11); stuck"},
		{Event{Kind: EventEscaped, Pids: []int{13}, Err: errors.New("no cgroup2")},
			"warning: cmd left 1 process running outside its process group (pids 13), not killed: it had no cgroup of its own (no cgroup2)"},
	} {
		if got := s.Text(c.e); !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want it to contain %q", c.e, got, c.want)
		}
	}
	if got := s.Text(Event{Kind: EventExtended}); got != "" {
		t.Errorf("EventExtended: %q, want none", got)
	}
}
