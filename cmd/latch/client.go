package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/creds"
)

// Exit codes of every verb (README's table; also in `latch help run`). The command's own
// status passes through `latch run` unchanged, so latch's codes sit where tools rarely go.
const (
	exitNotHeld       = 1   // release, extend: the token does not hold the key (N); locks release: free, or --token no longer holds it
	exitUsage         = 64  // bad input: flags, arguments, key, duration out of range
	exitRefused       = 65  // extend: the server cannot extend; admin verbs: the node refused the request as not applicable; nothing applied
	exitUnavailable   = 69  // no server answered (or all said unavailable), auth failed, or not a latch server
	exitLocalIO       = 74  // snapshot save, recover, server: a local file or --data-dir could not be read or written, or is damaged
	exitNotAcquired   = 75  // held when the wait ran out, busy, or a grant too late to use was given back
	exitIndeterminate = 76  // unknown whether the lock (or change) was taken or released; nothing was run
	exitKilled        = 79  // run: the command was killed because its lease was ending
	exitCannotRun     = 126 // run: the command cannot be executed, or could not be started
	exitNotFound      = 127 // run: the command was not found
)

const exitCodesHelp = `Exit codes:
   0     acquired / released / extended (run: the command's own status is passed through)
   1     release, extend: the token does not hold the key (already released or expired)
   64    bad input: a flag, argument, key or duration out of range; nothing was sent
   65    extend: the server cannot extend (latch/1, or a cluster not all on revision 2)
   69    unavailable: no server could be reached or took the request during the whole call
         (down, no leader, not a latch server), or the handshake failed; nothing was applied
   75    not acquired: a server said the lock was still held when --wait ran out, or was busy,
         or the grant came with less lease left than --budget and was released (confirmed)
   76    indeterminate: the lock may be held until its lease ends (a lost answer, or the
         release of a grant that could not be used was not confirmed); run did not start
         the command
   79    run: the command was killed because its lease was ending, the lock was lost, or
         --max-hold ran out
   126   run: the command is not executable (checked before the lock is taken), or could
         not be started (the lock was then released, confirmed)
   127   run: the command was not found (checked before the lock is taken)
   128+N run: the command died of signal N (a second SIGINT or SIGTERM kills its group: 137)`

// clientFlags are the connection flags every client verb takes.
func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "servers", Value: cli.NewStringSlice("127.0.0.1:7400"), Usage: "`ADDRS` of any latch nodes, comma separated", EnvVars: env("SERVERS")},
		&cli.StringFlag{Name: "secret-file", Usage: "`FILE` whose first line is the secret to prove", EnvVars: env("SECRET_FILE")},
		&cli.StringFlag{Name: "tls-ca", Usage: "PEM `FILE` of the CA that signed the servers' certificates: connect with TLS", EnvVars: env("TLS_CA")},
		&cli.StringFlag{Name: "tls-server-name", Usage: "check the servers' certificates for `NAME` instead of the host in --servers " +
			"(e.g. latch through kubectl port-forward to 127.0.0.1)", EnvVars: env("TLS_SERVER_NAME")},
	}
}

// acquireFlags are --wait, --lease and --budget; budgetDefault is what help shows as
// --budget's default (acquireInputs applies it).
func acquireFlags(budgetDefault string) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "wait", Usage: "how long to wait for a held lock (0..255s; 0: one immediate attempt)", EnvVars: env("WAIT")},
		&cli.DurationFlag{Name: "lease", Value: 30 * time.Second, Usage: "how long the lock is held at most (1s..1h)", EnvVars: env("LEASE")},
		&cli.DurationFlag{Name: "budget", DefaultText: budgetDefault, Usage: "the least lease left that the work needs when the grant arrives (0..250s, below --lease)", EnvVars: env("BUDGET")},
	}
}

// newClient builds a client from the connection flags.
func newClient(c *cli.Context) (*client.Client, error) {
	cfg, err := clientConfig(c)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg)
	if err != nil {
		return nil, usageErr(c.Command.Name, "%s", strings.TrimPrefix(err.Error(), "latch: "))
	}
	return cl, nil
}

// clientConfig is the client.Config of --servers, --secret-file and the TLS flags; a file
// that cannot be used is a usage error of the verb.
func clientConfig(c *cli.Context) (client.Config, error) {
	tc, err := creds.ClientTLS(dialFiles(c))
	if err != nil {
		return client.Config{}, usageErr(c.Command.Name, "%v", err)
	}
	secret, err := creds.ReadSecret("secret-file", c.String("secret-file"), nil) // a file others may write is refused
	if err != nil {
		return client.Config{}, usageErr(c.Command.Name, "%v", err)
	}
	return client.Config{Servers: c.StringSlice("servers"), Secret: secret, TLS: tc}, nil
}

// exitFor maps a client error to the documented exit code, with the error's message.
func exitFor(verb string, err error) error {
	code := exitUnavailable
	switch {
	case errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrIndeterminate):
		// No server took it (down, no leader, not a latch server): 69, even though it is a
		// definite non-acquire (ErrTimeout) too. 75 means a server said the lock was held.
	case errors.Is(err, client.ErrTimeout), errors.Is(err, client.ErrBusy):
		code = exitNotAcquired
	case errors.Is(err, client.ErrIndeterminate):
		code = exitIndeterminate
	case errors.Is(err, client.ErrNotHeld):
		code = exitNotHeld
	case errors.Is(err, client.ErrBadKey), errors.Is(err, client.ErrUnsupportedDuration), errors.Is(err, client.ErrInsufficientLease):
		code = exitUsage
	}
	return cli.Exit(fmt.Sprintf("latch %s: %s", verb, strings.TrimPrefix(err.Error(), "latch: ")), code)
}

// acquireFailed is exitFor for a failed acquire, except that a grant the client got but would
// not hand out (the ticket gate) is first given back: the client releases it in the
// background, and this waits for that release (at most client.IOTimeout and a second) before
// the CLI exits, so that it is sent at all. Confirmed (R or N), the lock is not held: 75.
func acquireFailed(verb string, err error) error {
	comp := client.CompensationOf(err)
	if comp == nil || !errors.Is(err, client.ErrIndeterminate) {
		return exitFor(verb, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), client.IOTimeout+time.Second)
	defer cancel()
	if comp.Wait(ctx) == nil {
		return cli.Exit(fmt.Sprintf("latch %s: not acquired: %s; it was released again (confirmed)", verb, comp.Reason), exitNotAcquired)
	}
	msg := strings.TrimSuffix(strings.TrimPrefix(err.Error(), "latch: "), "; it is being released in the background")
	return cli.Exit(fmt.Sprintf("latch %s: %s; its release was not confirmed: the lock may be held until its lease ends", verb, msg), exitIndeterminate)
}

// acquireInputs reads --wait, --lease and --budget (defaultBudget, named by budgetRule in
// messages, when --budget is not given) and refuses, before anything is sent, what the
// client would refuse (client.CheckAcquire) and, on top, what could never pass the ticket
// gate: the lease is reckoned from the moment the request is written, so a grant always
// arrives with less than the whole lease left, and a budget must be below the lease (in the
// whole seconds it is sent as). The protocol allows a budget equal to the lease.
func acquireInputs(c *cli.Context, defaultBudget time.Duration, budgetRule string) (client.AcquireOptions, time.Duration, error) {
	verb := c.Command.Name
	o, budget := client.AcquireOptions{Wait: c.Duration("wait"), Lease: c.Duration("lease")}, c.Duration("budget")
	if !c.IsSet("budget") {
		budget = defaultBudget
	}
	if o.Lease <= 0 { // the client takes 0 for its default
		return o, 0, usageErr(verb, "--lease %s is outside 1s..1h (LATCH_LEASE too; 0 is not a lease)", o.Lease)
	}
	d, err := client.CheckAcquire(budget, o)
	if err != nil {
		return o, 0, usageErr(verb, "--wait, --lease or --budget: %s", strings.TrimPrefix(err.Error(), "latch: "))
	}
	if d.Budget > 0 && d.Budget >= d.Lease {
		return o, 0, usageErr(verb, "%s %s must be below --lease %s: a grant never arrives with the whole lease left", budgetRule, d.Budget, d.Lease)
	}
	return o, budget, nil
}

func acquireCommand() *cli.Command {
	return &cli.Command{
		Name:      "acquire",
		Usage:     "take a lock and print its fencing token and lease deadline",
		ArgsUsage: "KEY",
		Description: "The lock stays held after latch exits, until `latch release KEY TOKEN` or the end of the lease.\n" +
			"Pass the token to every resource the lock protects.\n\n" + exitCodesHelp,
		Flags: append(append(clientFlags(), acquireFlags("0s")...),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object: key, token, deadline, lease_ms"}),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, "acquire", 1, "one KEY"); err != nil {
				return err
			}
			o, budget, err := acquireInputs(c, 0, "--budget")
			if err != nil {
				return err
			}
			key, err := keyArg("acquire", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			t, err := cl.Acquire(c.Context, key, budget, o)
			if err != nil {
				return acquireFailed("acquire", err)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(map[string]any{
					"key": t.Key, "token": t.Token, "deadline": t.Deadline.UTC().Format(time.RFC3339Nano),
					"lease_ms": t.Remaining().Milliseconds(),
				})
			}
			fmt.Fprintf(c.App.Writer, "token %d\ndeadline %s\n", t.Token, t.Deadline.UTC().Format(time.RFC3339Nano))
			return nil
		},
	}
}

func releaseCommand() *cli.Command {
	return &cli.Command{
		Name:        "release",
		Usage:       "release a lock held with TOKEN (exit 0 only when it was released)",
		ArgsUsage:   "KEY TOKEN",
		Description: exitCodesHelp,
		Flags:       clientFlags(),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, "release", 2, "KEY TOKEN"); err != nil {
				return err
			}
			tok, err := tokenArg("release", "TOKEN", c.Args().Get(1))
			if err != nil {
				return err
			}
			key, err := keyArg("release", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.Release(c.Context, key, tok); err != nil {
				return exitFor("release", err)
			}
			return nil
		},
	}
}

func pingCommand() *cli.Command {
	return &cli.Command{
		Name:  "ping",
		Usage: "check that a server answers (handshake and ping)",
		Flags: clientFlags(),
		Action: func(c *cli.Context) error {
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
			defer cancel()
			start := time.Now()
			if err := cl.Ping(ctx); err != nil {
				return exitFor("ping", err)
			}
			fmt.Fprintf(c.App.Writer, "pong in %s\n", time.Since(start).Round(time.Microsecond))
			return nil
		},
	}
}

// stderrf prints a line for the user on standard error (App.ErrWriter, which Setup sets).
func stderrf(c *cli.Context, format string, args ...any) {
	fmt.Fprintf(c.App.ErrWriter, format+"\n", args...)
}
