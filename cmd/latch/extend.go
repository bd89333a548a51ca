package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"
)

const extendExitCodes = `Exit codes:
   0     extended: the new deadline is printed
   1     not held: TOKEN does not hold KEY (released, expired, or another token's); nothing extended
   64    bad input: a flag, argument, key or --lease out of range; nothing was sent
   65    refused: the server does not offer extend (a latch/1 server, or a cluster mid-upgrade);
         nothing extended, and asking again does not help until it does
   69    unavailable: no server could be reached or took the request; nothing extended
   76    indeterminate: it may or may not have been extended (a lost answer, or one that came
         after the new lease would have ended); extending again is safe`

func extendCommand() *cli.Command {
	return &cli.Command{
		Name:      "extend",
		Usage:     "give a lock held with TOKEN a new lease (exit 0 only when it was extended)",
		ArgsUsage: "KEY TOKEN",
		Description: "The new lease (--lease) counts from when the extend is sent; the token stays the same. The\n" +
			"server extends only a lease that has not ended. Prints the new deadline as `latch acquire` does.\n" +
			"Needs a server with protocol revision 2.\n\n" + extendExitCodes,
		Flags: append(clientFlags(),
			&cli.DurationFlag{Name: "lease", Value: 30 * time.Second, Usage: "the new lease (1s..1h)", EnvVars: env("LEASE")}),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, "extend", 2, "KEY TOKEN"); err != nil {
				return err
			}
			tok, err := tokenArg("extend", "TOKEN", c.Args().Get(1))
			if err != nil {
				return err
			}
			if lease := c.Duration("lease"); lease <= 0 { // the client takes 0 for its default; the range is its to check
				return usageErr("extend", "--lease %s is not a lease (LATCH_LEASE too)", lease)
			}
			key, err := keyArg("extend", c.Args().First())
			if err != nil {
				return err
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			dl, err := cl.Extend(c.Context, key, tok, c.Duration("lease"))
			switch {
			case errors.Is(err, client.ErrUnsupported):
				return cli.Exit("latch extend: "+strings.TrimPrefix(err.Error(), "latch: "), exitRefused)
			case errors.Is(err, client.ErrTimeout) && !errors.Is(err, client.ErrIndeterminate):
				// Never sent in time: nothing extended (for acquire, 75 means "held").
				return cli.Exit("latch extend: "+strings.TrimPrefix(err.Error(), "latch: "), exitUnavailable)
			case errors.Is(err, client.ErrTicketEnded):
				return cli.Exit("latch extend: "+strings.TrimPrefix(err.Error(), "latch: "), exitIndeterminate)
			case err != nil:
				return exitFor("extend", err)
			}
			fmt.Fprintf(c.App.Writer, "deadline %s\n", dl.UTC().Format(time.RFC3339Nano))
			return nil
		},
	}
}
