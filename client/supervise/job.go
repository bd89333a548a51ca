package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/latchd/latch/client"
)

// ReleaseTimeout bounds the release of a job's lock once its command is gone, or could not
// be started (docs/protocol.md section 10).
const ReleaseTimeout = 5 * time.Second

// Job is a command to run under a granted lock, as `latch run` does: started with the lock in
// its environment, supervised with the ticket's lease, and the lock released after.
type Job struct {
	Ticket *client.Ticket
	// Path, Args, Stdin, Stdout, Stderr and Terminal are Spec's.
	Path            string
	Args            []string
	Stdin, Terminal *os.File
	Stdout, Stderr  io.Writer
	// Schedule, Signals and Notice are Plan's; the Deadline and the Lease are the ticket's.
	Schedule Schedule
	Signals  <-chan os.Signal
	Notice   func(Event)
}

// StartError is Run's error for a command that could not be started: Err is why, Release the
// outcome of giving the lock back (nil: confirmed; else the lock may be held until its lease
// ends).
type StartError struct {
	Err, Release error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Run starts the command (Start) with LATCH_KEY, LATCH_TOKEN and LATCH_DEADLINE (RFC 3339,
// UTC: the first deadline, before any extension) added to this process's environment,
// supervises it (Supervise) and releases the lock once it is gone (Release), with the
// outcome in Outcome.Release. A command that cannot be started is a *StartError, after the
// release.
func (j Job) Run() (Outcome, error) {
	t := j.Ticket
	plan := Plan{Deadline: t.Deadline, Schedule: j.Schedule, Lease: t, Signals: j.Signals, Notice: j.Notice}
	g, err := Start(Spec{
		Path: j.Path, Args: j.Args, Stdin: j.Stdin, Stdout: j.Stdout, Stderr: j.Stderr, Terminal: j.Terminal, KillAt: plan.GuardKillAt(),
		Env: append(os.Environ(),
			"LATCH_KEY="+t.Key,
			"LATCH_TOKEN="+strconv.FormatUint(t.Token, 10),
			"LATCH_DEADLINE="+t.Deadline.UTC().Format(time.RFC3339Nano),
		),
	})
	if err != nil {
		return Outcome{}, &StartError{Err: err, Release: Release(t)}
	}
	out := g.Supervise(plan)
	// Supervise returns once the command's cgroup is empty, so nothing of the command runs
	// when the lock is given up: keep the release after it. Something that SIGKILL did not end
	// within cgroupDrain keeps the lock until its lease ends.
	if out.Undrained != nil {
		out.Release = fmt.Errorf("not released: %w", out.Undrained)
	} else {
		out.Release = Release(t)
	}
	return out, nil
}

// Release gives t's lock back within ReleaseTimeout; nil when that is confirmed (released,
// or it held nothing any more).
func Release(t *client.Ticket) error {
	ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
	defer cancel()
	if err := t.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
		return err
	}
	return nil
}

// AcquireOrSignal acquires as cl.Acquire does, ending the attempt (client.ErrCanceled) when
// one of sigs arrives first: the signals that come while latch run waits for the lock end the
// wait; once the command runs they are its (Plan.Signals).
func AcquireOrSignal(ctx context.Context, cl *client.Client, sigs <-chan os.Signal, key string, budget time.Duration, o client.AcquireOptions) (*client.Ticket, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-actx.Done():
		}
	}()
	return cl.Acquire(actx, key, budget, o)
}
