package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/wire"
)

func locksCommand() *cli.Command {
	return &cli.Command{
		Name:  "locks",
		Usage: "list held locks (key, token, lease left, waiters) as the leader sees them; show or release one",
		Description: "Read through any node's --http from the leader, and only from a leader that has confirmed it\n" +
			"still leads. The list is fetched page by page in key order. Every call needs the admin\n" +
			"credential when the server has one (--admin-secret-file, or a certificate of --admin-tls-ca).\n" +
			"A single-mode server with another credential (--secret-file) but no admin one has these\n" +
			"calls off: they are refused (exit 69) until it is restarted with --admin-secret-file.",
		Flags: append(adminFlags(),
			&cli.StringFlag{Name: "prefix", Usage: "only keys that start with `P`"},
			&cli.IntFlag{Name: "limit", Usage: "list at most `N` keys (0: all)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per lock, one per line"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageErr("locks", "unexpected arguments %q (subcommands: show KEY, release KEY)", c.Args().Slice())
			}
			if c.Int("limit") < 0 {
				return usageErr("locks", "--limit must be 0 (all) or more")
			}
			return adminCall(c, "locks", true, 0, func(ctx context.Context, a admin.Remote, secret []byte) error {
				return listLocks(ctx, c, a, secret)
			})
		},
		Subcommands: []*cli.Command{
			{
				Name:      "show",
				Usage:     "show one key: free, or held with its token, lease left and waiters",
				ArgsUsage: "KEY",
				Flags:     append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print the JSON"}),
				Action: func(c *cli.Context) error {
					key, err := oneKey(c)
					if err != nil {
						return usageErr("locks show", "%v", err)
					}
					return adminCall(c, "locks show", true, adminTimeout, func(ctx context.Context, a admin.Remote, secret []byte) error {
						lk, err := a.ShowLock(ctx, key, secret)
						if err != nil {
							return adminExit("locks show", err)
						}
						if c.Bool("json") {
							return json.NewEncoder(c.App.Writer).Encode(lk)
						}
						_, err = fmt.Fprintln(c.App.Writer, lk)
						return err
					})
				},
			},
			{
				Name:      "release",
				Usage:     "free a key through the log, as its holder's release would (the next waiter is granted)",
				ArgsUsage: "KEY",
				Description: "Prints the token it freed. With --token, it frees the key only while that token holds\n" +
					"it, and refuses (exit 1) when it no longer does; without, it frees whichever token holds it.\n" +
					"The holder is not told: its own release later answers not held, and a resource that checks\n" +
					"fencing tokens refuses its writes once the next holder has written.",
				Flags: append(adminFlags(), &cli.Uint64Flag{Name: "token", Usage: "free the key only if token `T` holds it"}),
				Action: func(c *cli.Context) error {
					key, err := oneKey(c)
					if err != nil {
						return usageErr("locks release", "%v", err)
					}
					if c.IsSet("token") && client.CheckToken(c.Uint64("token")) != nil {
						return usageErr("locks release", "--token %d: tokens are 1..%d", c.Uint64("token"), uint64(wire.MaxToken))
					}
					return adminCall(c, "locks release", true, adminTimeout, func(ctx context.Context, a admin.Remote, secret []byte) error {
						return forceRelease(ctx, c, a, secret, key, c.Uint64("token"))
					})
				},
			},
		},
	}
}

// oneKey is the verb's one KEY argument, checked by the client's key rules (client.CheckKey).
func oneKey(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("want exactly one KEY, got %d arguments (flags go before the key)", c.NArg())
	}
	key, err := wire.ParseKeyText(c.Args().First())
	if err != nil {
		return "", err
	}
	if err := client.CheckKey(key); err != nil {
		return "", fmt.Errorf("key %s: %s", wire.KeyText(key), strings.TrimPrefix(err.Error(), "latch: "))
	}
	return key, nil
}

func listLocks(ctx context.Context, c *cli.Context, a admin.Remote, secret []byte) error {
	table := admin.NewLockTable(c.App.Writer, c.Bool("json"))
	err := a.EachLock(ctx, c.String("prefix"), c.Int("limit"), secret, table.Add)
	if err == nil || table.Rows() > 0 { // a listing that failed at once writes nothing on stdout
		table.Flush()
	}
	if err != nil {
		return adminExit("locks", err)
	}
	return nil
}

func forceRelease(ctx context.Context, c *cli.Context, a admin.Remote, secret []byte, key string, token uint64) error {
	freed, err := a.ReleaseLock(ctx, key, token, secret)
	var se *admin.StatusError
	switch {
	case err == nil:
		fmt.Fprintf(c.App.Writer, "released %s token %d\n", wire.KeyText(key), freed)
		return nil
	case errors.As(err, &se) && se.Code == http.StatusConflict:
		return cli.Exit("latch locks release: not released: "+strings.TrimPrefix(se.Msg, admin.ErrNotHeld.Error()+": "), exitNotHeld)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &se) && se.Code == outcome.StatusIndeterminate:
		return cli.Exit("latch locks release: unknown whether it was released ("+err.Error()+"): check with latch locks show "+shellWord(wire.KeyText(key)), exitIndeterminate)
	}
	return adminExit("locks release", err)
}

// shellWord is s as one word of a POSIX shell command line (single quotes).
func shellWord(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
