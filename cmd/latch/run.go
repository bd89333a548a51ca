package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/client/supervise"
)

// releaseTimeout bounds the release after the command exits (docs/protocol.md section 10).
const releaseTimeout = 5 * time.Second

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command while holding a lock; stop it before the lease ends",
		ArgsUsage: "KEY -- CMD [ARGS...]",
		Description: "Acquires KEY, runs CMD with LATCH_KEY, LATCH_TOKEN and LATCH_DEADLINE (RFC 3339, UTC) in its\n" +
			"environment, and releases the lock when CMD exits. CMD is looked up (PATH, execute bit) before the\n" +
			"lock is taken. It runs in a process group of its own, which is the terminal's foreground group\n" +
			"when latch has the terminal (so it can read it), and the terminal is given back after. When the\n" +
			"lease is about to end (--kill-grace before it) the group gets SIGTERM, and SIGKILL just before\n" +
			"the end, so the command never runs without the lock; if latch itself dies, even of SIGKILL, a\n" +
			"guard process kills the group at once. The first SIGINT, SIGTERM or SIGHUP (to latch, or Ctrl-C\n" +
			"at the terminal) is the command's; a second kills its group at once. The command is never\n" +
			"started without the lock. --budget defaults to --kill-grace plus one second and must be below\n" +
			"--lease: a grant with less lease left than the budget is given back.\n\n" +
			exitCodesHelp,
		Flags: append(append(clientFlags(), acquireFlags(0)...),
			&cli.DurationFlag{Name: "kill-grace", Value: 10 * time.Second, Usage: "SIGTERM this long before the lease ends, SIGKILL at its end", EnvVars: env("KILL_GRACE")},
		),
		Action: runAction,
	}
}

// runArgs splits KEY -- CMD [ARGS...]; a flag after KEY is refused, not run as the command.
func runArgs(c *cli.Context) (string, []string, error) {
	args := c.Args().Slice()
	if len(args) >= 2 && args[1] == "--" {
		args = append(args[:1:1], args[2:]...)
	} else if len(args) >= 2 && strings.HasPrefix(args[1], "-") {
		return "", nil, usageErr("run", "flag %s after KEY: flags go before KEY", args[1])
	}
	if len(args) < 2 {
		return "", nil, usageErr("run", "want KEY -- CMD [ARGS...] (flags go before KEY)")
	}
	return args[0], args[1:], nil
}

func runAction(c *cli.Context) error {
	key, argv, err := runArgs(c)
	if err != nil {
		return err
	}
	grace, lease := c.Duration("kill-grace"), c.Duration("lease")
	if supervise.CheckGrace(grace, lease) != nil {
		return usageErr("run", "--kill-grace %s must be shorter than --lease %s minus %s", grace, lease, supervise.KillMargin)
	}
	o, budget, err := acquireInputs(c, grace+time.Second, "--budget (default: --kill-grace plus 1s)")
	if err != nil {
		return err
	}
	path, err := supervise.Resolve(argv[0])
	if err != nil {
		var re *supervise.ResolveError
		if errors.As(err, &re) && re.NotFound {
			return cli.Exit("latch run: "+err.Error()+"; no lock was taken", exitNotFound)
		}
		return cli.Exit("latch run: "+err.Error()+"; no lock was taken", exitCannotRun)
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()

	// Signals that arrive while acquiring end the attempt; after the start they go to CMD.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	t, err := acquireOrSignal(c.Context, cl, sigs, key, budget, o)
	if err != nil {
		return acquireFailed("run", cl, err)
	}

	g, err := supervise.Start(supervise.Spec{
		Path: path, Args: argv, Stdin: os.Stdin, Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Terminal: os.Stdin,
		Env: append(os.Environ(),
			"LATCH_KEY="+t.Key,
			"LATCH_TOKEN="+strconv.FormatUint(t.Token, 10),
			"LATCH_DEADLINE="+t.Deadline.UTC().Format(time.RFC3339Nano),
		),
	})
	if err != nil {
		return startFailed(c, t, argv[0], err)
	}
	plan := supervise.LeasePlan(t.Deadline, grace)
	plan.Signals = sigs
	plan.Notice = func(e supervise.Event) {
		switch e {
		case supervise.EventTerm:
			stderrf(c, "latch run: lease of %s ends at %s; sending SIGTERM", key, t.Deadline.UTC().Format(time.RFC3339Nano))
		case supervise.EventKill:
			stderrf(c, "latch run: lease of %s is ending; sending SIGKILL", key)
		case supervise.EventEscalate:
			stderrf(c, "latch run: a second signal; sending SIGKILL to the command's process group")
		}
	}
	out := g.Supervise(plan)
	releaseAfter(c, t)

	if out.LeaseEnded {
		return cli.Exit(fmt.Sprintf("latch run: %s was stopped because its lease was ending", argv[0]), exitKilled)
	}
	ws, _ := out.State.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		return cli.Exit("", 128+int(ws.Signal()))
	case out.State.ExitCode() != 0:
		return cli.Exit("", out.State.ExitCode())
	}
	return nil
}

// acquireOrSignal acquires, ending the attempt when one of sigs arrives.
func acquireOrSignal(ctx context.Context, cl *client.Client, sigs <-chan os.Signal, key string, budget time.Duration, o client.AcquireOptions) (*client.Ticket, error) {
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

// startFailed releases the lock of a command that could not be started: 126 once the release
// is confirmed, else 76 (the lock may be held until its lease ends).
func startFailed(c *cli.Context, t *client.Ticket, name string, err error) error {
	if rerr := release(t); rerr != nil {
		return cli.Exit(fmt.Sprintf("latch run: starting %s: %v; the release of %s token %d was not confirmed (%v): the lock may be held until %s",
			name, err, t.Key, t.Token, rerr, t.Deadline.UTC().Format(time.RFC3339Nano)), exitIndeterminate)
	}
	return cli.Exit(fmt.Sprintf("latch run: starting %s: %v; the lock was released", name, err), exitCannotRun)
}

// release gives the lock back within releaseTimeout; nil when confirmed (released, or it
// held nothing any more).
func release(t *client.Ticket) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := t.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
		return err
	}
	return nil
}

// releaseAfter gives the lock back once the command is gone. A failure is reported but does
// not change the exit status: the lease ends the lock anyway.
func releaseAfter(c *cli.Context, t *client.Ticket) {
	if err := release(t); err != nil {
		stderrf(c, "latch run: release of %s token %d: %v (the lease ends it at %s)", t.Key, t.Token, err, t.Deadline.UTC().Format(time.RFC3339Nano))
	}
}
