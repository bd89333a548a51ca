package supervise

import (
	"fmt"
	"time"
)

// Subject is what the notices of one run name: the lock held and the command run under it.
type Subject struct {
	Key     string
	Token   uint64
	Command string        // the command's name (argv[0])
	MaxHold time.Duration // the hold cap (latch run --max-hold), for EventTerm and EventKill with Held
}

// Text is the line `latch run` prints for e (without its "latch run: " prefix), or "" for an
// event it does not report (EventExtended).
func (s Subject) Text(e Event) string {
	at := e.At.UTC().Format(time.RFC3339Nano)
	switch e.Kind {
	case EventTerm:
		if e.Held {
			return fmt.Sprintf("--max-hold %s of %s ends at %s; sending SIGTERM", s.MaxHold, s.Key, at)
		}
		return fmt.Sprintf("lease of %s ends at %s; sending SIGTERM", s.Key, at)
	case EventKill:
		what := "lease"
		if e.Held {
			what = "--max-hold"
		}
		return fmt.Sprintf("%s of %s is ending; sending SIGKILL", what, s.Key)
	case EventEscalate:
		return "a second signal; sending SIGKILL to the command's process group"
	case EventLost:
		return fmt.Sprintf("the server says token %d no longer holds %s; sending SIGTERM now", s.Token, s.Key)
	case EventUnsupported:
		return fmt.Sprintf("warning: the server cannot extend leases (no protocol revision 2); %s is stopped as the lease of %s ends at %s", s.Command, s.Key, at)
	case EventExtendFailed:
		return fmt.Sprintf("extending the lease of %s failed: %v; it ends at %s", s.Key, e.Err, at)
	case EventOutlived:
		line := fmt.Sprintf("killed %s that outlived %s (pids %s)", processes(len(e.Pids)), s.Command, pidList(e.Pids))
		if e.Err != nil {
			line += fmt.Sprintf("; %v", e.Err)
		}
		return line
	case EventEscaped:
		return fmt.Sprintf("warning: %s left %s running outside its process group (pids %s), not killed: it had no cgroup of its own (%v)",
			s.Command, processes(len(e.Pids)), pidList(e.Pids), e.Err)
	case EventPaused:
		return fmt.Sprintf("%s is stopped; its lease is not extended while it is (SIGTERM at %s)", s.Command, at)
	}
	return ""
}
