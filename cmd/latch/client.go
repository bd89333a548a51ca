package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
)

// Exit codes of the client verbs (also listed in `latch help run`). The command's own
// status passes through `latch run` unchanged, so latch's codes sit where tools rarely go.
const (
	exitNotHeld       = 1  // release: the token does not hold the key (N)
	exitUsage         = 64 // bad input: key, duration out of range, missing arguments
	exitUnavailable   = 69 // no server answered (or all said unavailable), auth failed, or not a latch server
	exitNotAcquired   = 75 // a server said the lock was held when the wait ran out, or busy
	exitIndeterminate = 76 // unknown whether the lock was taken or released; nothing was run
	exitKilled        = 79 // run: the command was killed because its lease was ending
)

const exitCodesHelp = `Exit codes:
   0     acquired / released (run: the command's own status is passed through)
   1     release: the token does not hold the key (already released or expired)
   64    bad input (key, duration out of range, missing arguments)
   69    unavailable: no server could be reached or took the request during the whole call
         (down, no leader, not a latch server), or the handshake failed; nothing was applied
   75    not acquired: a server said the lock was still held when --wait ran out, or was busy
   76    indeterminate: the lock may or may not have been taken; run did not start the command
   79    run: the command was killed because its lease was ending
   128+N run: the command died of signal N`

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

func acquireFlags(defaultBudget time.Duration) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "wait", Usage: "how long to wait for a held lock (0..255s; 0: one immediate attempt)", EnvVars: env("WAIT")},
		&cli.DurationFlag{Name: "lease", Value: 30 * time.Second, Usage: "how long the lock is held at most (1s..1h)", EnvVars: env("LEASE")},
		&cli.DurationFlag{Name: "budget", Value: defaultBudget, Usage: "the least lease left that the work needs when the grant arrives (0..250s, at most --lease)", EnvVars: env("BUDGET")},
	}
}

// newClient builds a client from the connection flags.
func newClient(c *cli.Context) (*client.Client, error) {
	tc, err := clientTLS(c)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("latch %s: %v", c.Command.Name, err), exitUsage)
	}
	secret, err := clientSecret(c)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("latch %s: %v", c.Command.Name, err), exitUsage)
	}
	cl, err := client.New(client.Config{
		Servers: c.StringSlice("servers"),
		Secret:  secret,
		TLS:     tc,
	})
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("latch %s: %s", c.Command.Name, strings.TrimPrefix(err.Error(), "latch: ")), exitUsage)
	}
	return cl, nil
}

// clientSecret is the first secret of --secret-file (nil without it), read by readKeyFile:
// a file others may write is refused.
func clientSecret(c *cli.Context) ([]byte, error) {
	s, err := readSecrets("secret-file", c.String("secret-file"), nil)
	if len(s) == 0 {
		return nil, err
	}
	return s[0], nil
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

func acquireCommand() *cli.Command {
	return &cli.Command{
		Name:      "acquire",
		Usage:     "take a lock and print its fencing token and lease deadline",
		ArgsUsage: "KEY",
		Description: "The lock stays held after latch exits, until `latch release KEY TOKEN` or the end of the lease.\n" +
			"Pass the token to every resource the lock protects.\n\n" + exitCodesHelp,
		Flags: append(append(clientFlags(), acquireFlags(0)...),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object: key, token, deadline, lease_ms"}),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("latch acquire: want exactly one KEY (flags go before it)", exitUsage)
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			t, err := cl.Acquire(c.Context, c.Args().First(), c.Duration("budget"),
				client.AcquireOptions{Wait: c.Duration("wait"), Lease: c.Duration("lease")})
			if err != nil {
				return exitFor("acquire", err)
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
			if c.NArg() != 2 {
				return cli.Exit("latch release: want KEY TOKEN (flags go before them)", exitUsage)
			}
			tok, err := strconv.ParseUint(c.Args().Get(1), 10, 64)
			if err != nil {
				return cli.Exit(fmt.Sprintf("latch release: TOKEN %q is not a whole number", c.Args().Get(1)), exitUsage)
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.Release(c.Context, c.Args().First(), tok); err != nil {
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

// stderrf prints a line for the user on standard error.
func stderrf(c *cli.Context, format string, args ...any) {
	w := c.App.ErrWriter
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, format+"\n", args...)
}
