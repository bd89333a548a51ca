package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
)

// killMargin is how long before the ticket's lease deadline the command is sent SIGKILL, so
// that it is dead before the lease ends, not merely signalled.
const killMargin = 250 * time.Millisecond

// releaseTimeout bounds the release after the command exits (docs/protocol.md section 10).
const releaseTimeout = 5 * time.Second

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command while holding a lock; stop it before the lease ends",
		ArgsUsage: "KEY -- CMD [ARGS...]",
		Description: "Acquires KEY, runs CMD with LATCH_KEY, LATCH_TOKEN and LATCH_DEADLINE (RFC 3339, UTC) in its\n" +
			"environment, and releases the lock when CMD exits. CMD runs in its own process group. When the\n" +
			"lease is about to end (--kill-grace before it) the group gets SIGTERM, and SIGKILL just before\n" +
			"the end, so the command never runs without the lock. SIGINT, SIGTERM and SIGHUP sent to latch\n" +
			"are passed on to the command. The command is never started without the lock.\n" +
			"--budget defaults to --kill-grace plus one second: a grant with less lease left is given back.\n\n" +
			exitCodesHelp,
		Flags: append(append(clientFlags(), acquireFlags(0)...),
			&cli.DurationFlag{Name: "kill-grace", Value: 10 * time.Second, Usage: "SIGTERM this long before the lease ends, SIGKILL at its end", EnvVars: env("KILL_GRACE")},
		),
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) >= 2 && args[1] == "--" {
		args = append(args[:1], args[2:]...)
	}
	if len(args) < 2 {
		return cli.Exit("latch run: want KEY -- CMD [ARGS...] (flags go before KEY)", exitUsage)
	}
	key, argv := args[0], args[1:]
	grace, lease := c.Duration("kill-grace"), c.Duration("lease")
	if grace < 0 || grace+killMargin >= lease {
		return cli.Exit(fmt.Sprintf("latch run: --kill-grace %s must be shorter than --lease %s minus %s", grace, lease, killMargin), exitUsage)
	}
	budget := c.Duration("budget")
	if !c.IsSet("budget") {
		budget = min(grace+time.Second, lease)
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
	actx, cancel := context.WithCancel(c.Context)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-actx.Done():
		}
	}()
	t, err := cl.Acquire(actx, key, budget, client.AcquireOptions{Wait: c.Duration("wait"), Lease: lease})
	cancel()
	if err != nil {
		return exitFor("run", err)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.App.Writer, c.App.ErrWriter
	cmd.Env = append(os.Environ(),
		"LATCH_KEY="+t.Key,
		"LATCH_TOKEN="+strconv.FormatUint(t.Token, 10),
		"LATCH_DEADLINE="+t.Deadline.UTC().Format(time.RFC3339Nano),
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		releaseAfter(c, cl, t)
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		return cli.Exit(fmt.Sprintf("latch run: %v", err), code)
	}
	group := -cmd.Process.Pid

	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	term := time.NewTimer(time.Until(t.Deadline.Add(-grace)))
	kill := time.NewTimer(time.Until(t.Deadline.Add(-killMargin)))
	defer term.Stop()
	defer kill.Stop()
	leaseEnded := false
	for done := false; !done; {
		select {
		case <-exited:
			done = true
		case s := <-sigs:
			syscall.Kill(group, s.(syscall.Signal))
		case <-term.C:
			leaseEnded = true
			stderrf(c, "latch run: lease of %s ends at %s; sending SIGTERM", key, t.Deadline.UTC().Format(time.RFC3339Nano))
			syscall.Kill(group, syscall.SIGTERM)
		case <-kill.C:
			leaseEnded = true
			stderrf(c, "latch run: lease of %s is ending; sending SIGKILL", key)
			syscall.Kill(group, syscall.SIGKILL)
		}
	}
	// Whatever the command left in its group must not outlive the lock either.
	syscall.Kill(group, syscall.SIGKILL)
	releaseAfter(c, cl, t)

	if leaseEnded {
		return cli.Exit(fmt.Sprintf("latch run: %s was stopped because its lease was ending", argv[0]), exitKilled)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		return cli.Exit("", 128+int(ws.Signal()))
	case cmd.ProcessState.ExitCode() != 0:
		return cli.Exit("", cmd.ProcessState.ExitCode())
	}
	return nil
}

// releaseAfter gives the lock back once the command is gone. A failure is reported but does
// not change the exit status: the lease ends the lock anyway.
func releaseAfter(c *cli.Context, cl *client.Client, t *client.Ticket) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := t.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
		stderrf(c, "latch run: release of %s token %d: %v (the lease ends it at %s)", t.Key, t.Token, err, t.Deadline.UTC().Format(time.RFC3339Nano))
	}
}
