package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
)

// transferTimeout bounds one backup or restore from the command line.
const transferTimeout = 6 * time.Minute

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "back up the whole lock state (held locks and the token counter), or restore it",
		Subcommands: []*cli.Command{
			{
				Name:      "save",
				Usage:     "write a consistent backup, taken on the leader through any node, to FILE",
				ArgsUsage: "FILE",
				Description: "The backup is written to FILE.tmp, verified (it carries a CRC-32C) and renamed to FILE.\n" +
					"It holds every lock held when it was taken and the last token issued.",
				Flags:  adminFlags(),
				Action: snapshotSave,
			},
			{
				Name:      "restore",
				Usage:     "replace the whole state of a running cluster with the backup in FILE",
				ArgsUsage: "FILE",
				Description: "Every member's lock table becomes the backup's. The token counter becomes the largest of\n" +
					"the backup's, --token-floor and the cluster's current one, so no token is issued twice.\n" +
					"Tokens issued after the backup was taken are the trap: fenced resources have seen them.\n" +
					"Set --token-floor at or above the highest token ever issued (the max of latch_last_token\n" +
					"over the old cluster's history, or the highest token your resources stored), with a margin.\n" +
					"See deploy/README.md, \"Restore\".",
				Flags: append(adminFlags(),
					&cli.Uint64Flag{Name: "token-floor", Usage: "`N`: the next token is above N (required; 0 keeps the backup's counter)"}),
				Action: snapshotRestore,
			},
		},
	}
}

func snapshotSave(c *cli.Context) error {
	const verb = "snapshot save"
	if err := wantArgs(c, verb, 1, "one FILE"); err != nil {
		return err
	}
	file := c.Args().First()
	return adminCall(c, verb, true, transferTimeout, func(ctx context.Context, a admin.Remote, secret []byte) error {
		data, info, err := a.Backup(ctx, secret)
		switch {
		case errors.Is(err, admin.ErrBadBackup):
			return cli.Exit("latch "+verb+": "+strings.TrimPrefix(err.Error(), "admin: "), exitUnavailable)
		case err != nil:
			return adminExit(verb, err)
		}
		if err := admin.WriteBackup(file, data); err != nil {
			return cli.Exit("latch "+verb+": "+err.Error(), exitLocalIO)
		}
		fmt.Fprintf(c.App.Writer, "saved %s: %d bytes, index %d, last token %d, %d held keys\n",
			file, len(data), info.Index, uint64(info.LastToken), info.Keys)
		return nil
	})
}

func snapshotRestore(c *cli.Context) error {
	const verb = "snapshot restore"
	if err := wantArgs(c, verb, 1, "one FILE"); err != nil {
		return err
	}
	if err := requireFlags(c, verb, "token-floor"); err != nil {
		return err
	}
	file, floor := c.Args().First(), c.Uint64("token-floor")
	if floor > uint64(fsm.MaxToken) {
		return usageErr(verb, "--token-floor %d is above the largest token %d", floor, uint64(fsm.MaxToken))
	}
	data, info, err := admin.ReadBackup(file)
	if err != nil {
		return usageErr(verb, "%v", err)
	}
	return adminCall(c, verb, true, transferTimeout, func(ctx context.Context, a admin.Remote, secret []byte) error {
		res, err := a.Restore(ctx, data, floor, secret)
		if errors.Is(err, context.DeadlineExceeded) {
			return cli.Exit("latch "+verb+": no answer within "+transferTimeout.String()+"; check latch status before retrying", exitIndeterminate)
		} else if err != nil {
			return adminExit(verb, err)
		}
		fmt.Fprintf(c.App.Writer, "restored %s (%d held keys, last token %d): the cluster holds %d keys; last token %d "+
			"(the largest of the backup's, --token-floor %d and the cluster's previous %d)\n",
			file, info.Keys, uint64(info.LastToken), res.State.Keys, uint64(res.State.LastToken), floor, res.Previous)
		return nil
	})
}

func recoverCommand() *cli.Command {
	return &cli.Command{
		Name:  "recover",
		Usage: "offline: make this node's data a one-node cluster, after the cluster lost its quorum",
		Description: "Run it with the node's server stopped, on the most up-to-date survivor (compare the\n" +
			"--dry-run output of every survivor: highest last term, then highest last index). The node keeps its locks, becomes the\n" +
			"only voter, and its token counter rises to at least --token-floor: entries the lost majority\n" +
			"committed may be missing here, tokens among them. Then wipe the other survivors' data, start\n" +
			"this node with its usual flags, and start the others: they join it. See deploy/README.md, \"Lost quorum\".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Usage: "the stopped node's `DIR`", EnvVars: env("DATA_DIR")},
			&cli.StringFlag{Name: "id", Usage: "the node's `ID` (its --id)", EnvVars: env("ID")},
			&cli.StringFlag{Name: "advertise", Usage: "the peer `ADDR` others dial (its --advertise)", EnvVars: env("ADVERTISE")},
			&cli.Uint64Flag{Name: "token-floor", Usage: "`N`: the next token is above N (required unless --dry-run)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "only print what the data directory holds"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: runRecover,
	}
}

func runRecover(c *cli.Context) error {
	const verb = "recover"
	if err := requireFlags(c, verb, "data-dir"); err != nil {
		return err
	}
	dir := c.String("data-dir")
	show := func(what string, ds raftnode.DiskState) {
		if c.Bool("json") {
			out, _ := json.Marshal(map[string]any{what: ds})
			fmt.Fprintln(c.App.Writer, string(out))
			return
		}
		admin.WriteDiskState(c.App.Writer, what, ds)
	}
	if c.Bool("dry-run") {
		ds, err := raftnode.Inspect(dir, nil)
		if err != nil {
			return cli.Exit("latch "+verb+": "+err.Error(), exitLocalIO)
		}
		show(dir, ds)
		return nil
	}
	if !c.IsSet("token-floor") || c.String("id") == "" || c.String("advertise") == "" {
		return usageErr(verb, "give --id, --advertise and --token-floor (or --dry-run to look first)")
	}
	before, after, err := raftnode.Recover(raftnode.RecoverOptions{
		DataDir: dir, ID: c.String("id"), Addr: c.String("advertise"), TokenFloor: c.Uint64("token-floor"),
	})
	if errors.Is(err, fsm.ErrFloorRange) {
		return usageErr(verb, "%v", err)
	}
	if err != nil {
		return cli.Exit("latch "+verb+": "+err.Error(), exitLocalIO)
	}
	show("before", before)
	show("after", after)
	if !c.Bool("json") {
		fmt.Fprintf(c.App.Writer, "recovered: start this node as usual; it elects itself. Wipe the other survivors' data dirs before starting them.\n")
	}
	return nil
}
