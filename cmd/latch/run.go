package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/client/supervise"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command while holding a lock; stop it before the lease ends",
		ArgsUsage: "KEY -- CMD [ARGS...]",
		Description: "Acquires KEY, runs CMD with LATCH_KEY, LATCH_TOKEN and LATCH_DEADLINE (RFC 3339, UTC: the first\n" +
			"deadline, before any extension) in its environment, and releases the lock when CMD exits. CMD is\n" +
			"looked up (PATH, execute bit) before the lock is taken. It runs in a process group of its own, which\n" +
			"is the terminal's foreground group when latch has the terminal (so it can read it), and the\n" +
			"terminal is given back after. Where latch may create a cgroup v2 (root, or a delegated cgroup), CMD\n" +
			"also runs in a cgroup of its own, and what is left in it when CMD ends (a daemon, a double fork)\n" +
			"is killed before the release; otherwise latch warns of what left the group and still runs.\n\n" +
			"--lease is how long the key stays held if latch dies, not how long CMD may run: while CMD runs,\n" +
			"latch extends the lease every (--lease - --kill-grace) / 3, each attempt bounded by that and by the\n" +
			"SIGTERM, asked again after a backoff. Only a confirmed extension moves the end later. When the end\n" +
			"nears without one (--kill-grace before it) the group gets SIGTERM, and SIGKILL just before the end,\n" +
			"so CMD never runs without the lock; an answer \"not held\" sends SIGTERM at once. A stopped CMD\n" +
			"(Ctrl-Z) is not extended. --max-hold caps the whole hold: CMD is stopped then as at a lease end.\n" +
			"A server without extend (latch/1) keeps CMD to the first lease, with a warning. If latch itself\n" +
			"dies, even of SIGKILL, or is stopped, a guard process kills the group (at once, or at the end).\n\n" +
			"The first SIGINT, SIGTERM or SIGHUP (to latch, or Ctrl-C at the terminal) is the command's; a second\n" +
			"kills its group at once. The command is never started without the lock. --budget defaults to\n" +
			"--kill-grace plus one second and must be below --lease: a grant with less lease left than the\n" +
			"budget is given back. Exit 79 also when --max-hold or a lost lock stopped CMD.\n\n" +
			exitCodesHelp,
		Flags: append(append(clientFlags(), acquireFlags(runBudgetDefault)...),
			&cli.DurationFlag{Name: "kill-grace", Value: 10 * time.Second, Usage: "SIGTERM this long before the lease ends, SIGKILL at its end", EnvVars: env("KILL_GRACE")},
			&cli.DurationFlag{Name: "max-hold", Usage: "stop CMD after holding the lock this long, as at a lease end (0: no cap)", EnvVars: env("MAX_HOLD")},
		),
		Action: runAction,
	}
}

// runBudgetDefault is run's --budget when none is given (runAction).
const runBudgetDefault = "--kill-grace + 1s"

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
	key, err := keyArg("run", args[0])
	if err != nil {
		return "", nil, err
	}
	return key, args[1:], nil
}

func runAction(c *cli.Context) error {
	key, argv, err := runArgs(c)
	if err != nil {
		return err
	}
	grace, lease, maxHold := c.Duration("kill-grace"), c.Duration("lease"), c.Duration("max-hold")
	if err := supervise.CheckSchedule(lease, grace, maxHold); err != nil {
		return usageErr("run", "%v", err)
	}
	o, budget, err := acquireInputs(c, grace+time.Second, "--budget (default: "+runBudgetDefault+")")
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
	t, err := supervise.AcquireOrSignal(c.Context, cl, sigs, key, budget, o)
	if err != nil {
		return acquireFailed("run", err)
	}

	sched := supervise.Schedule{Lease: lease, Grace: grace}
	if maxHold > 0 {
		sched.HoldEnd = time.Now().Add(maxHold)
	}
	out, err := supervise.Job{
		Ticket: t, Path: path, Args: argv, Stdin: os.Stdin, Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Terminal: os.Stdin,
		Schedule: sched, Signals: sigs, Notice: runNotice(c, t, argv[0], maxHold),
	}.Run()
	var se *supervise.StartError
	switch {
	case errors.As(err, &se) && se.Release != nil:
		return cli.Exit(fmt.Sprintf("latch run: starting %s: %v; the release of %s token %d was not confirmed (%v): the lock may be held until %s",
			argv[0], se.Err, t.Key, t.Token, se.Release, t.CurrentDeadline().UTC().Format(time.RFC3339Nano)), exitIndeterminate)
	case err != nil:
		return cli.Exit(fmt.Sprintf("latch run: starting %s: %v; the lock was released", argv[0], err), exitCannotRun)
	case out.Release != nil: // reported, but the exit status stays the command's: the lease ends the lock anyway
		stderrf(c, "latch run: release of %s token %d: %v (the lease ends it at %s)", t.Key, t.Token, out.Release, t.CurrentDeadline().UTC().Format(time.RFC3339Nano))
	}
	switch {
	case out.Lost:
		return cli.Exit(fmt.Sprintf("latch run: %s was stopped because the server said the lock was no longer held", argv[0]), exitKilled)
	case out.HoldEnded:
		return cli.Exit(fmt.Sprintf("latch run: %s was stopped because --max-hold %s was reached", argv[0], maxHold), exitKilled)
	case out.LeaseEnded:
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

// runNotice prints what Supervise does and learns about the lease of t, which CMD name runs under.
func runNotice(c *cli.Context, t *client.Ticket, name string, maxHold time.Duration) func(supervise.Event) {
	subject := supervise.Subject{Key: t.Key, Token: t.Token, Command: name, MaxHold: maxHold}
	return func(e supervise.Event) {
		if line := subject.Text(e); line != "" {
			stderrf(c, "latch run: %s", line)
		}
	}
}
