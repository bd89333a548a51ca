package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client"

	"github.com/latchd/latch/wire"
)

// usageErr is a usage error of verb: one line, a pointer to its help, exit 64.
func usageErr(verb, format string, args ...any) error {
	name := strings.TrimSpace("latch " + verb)
	return cli.Exit(fmt.Sprintf("%s: %s (see %s --help)", name, fmt.Sprintf(format, args...), name), exitUsage)
}

// keyArg is a KEY argument of verb: a key written as latch writes keys that do not print as
// themselves (in double quotes with Go's escapes, wire.KeyText), or the key itself. The key
// rules are the client's to check.
func keyArg(verb, s string) (string, error) {
	k, err := wire.ParseKeyText(s)
	if err != nil {
		return "", usageErr(verb, "%v", err)
	}
	return k, nil
}

// tokenArg is a TOKEN argument (name, e.g. "TOKEN" or "--token") of verb: 1..wire.MaxToken,
// as every granted token is.
func tokenArg(verb, name, s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil && (strings.Trim(strings.TrimPrefix(s, "-"), "0123456789") != "" || s == "-" || s == "") {
		return 0, usageErr(verb, "%s %q is not a whole number", name, s)
	}
	if err != nil || client.CheckToken(t) != nil { // the CLI's rule on top: a usage error, not "not held"
		return 0, usageErr(verb, "%s %s: tokens are 1..%d", name, s, uint64(wire.MaxToken))
	}
	return t, nil
}

// helpOnce wraps urfave/cli's help command (one value for the whole process) once.
var helpOnce sync.Once

// withUsage makes every usage error of app and its commands a one-line usageErr instead of
// urfave/cli's whole help text and exit 1, gives the root and each command group an action
// that refuses unknown verbs, and refuses arguments to leaf commands that take none (no
// ArgsUsage). Required flags are checked by the actions (requireFlags): urfave/cli would
// print the whole help for them.
func withUsage(app *cli.App) *cli.App {
	app.OnUsageError = func(c *cli.Context, err error, _ bool) error {
		return usageErr("", "%v", err)
	}
	app.Action = groupAction("")
	app.Setup() // adds urfave/cli's help command, whose unknown topic would exit 3
	if h := app.Command("help"); h != nil && h.Action != nil {
		helpOnce.Do(func() {
			shown := h.Action
			h.Action = func(c *cli.Context) error {
				if name := c.Args().First(); name != "" && c.App.Command(name) == nil {
					return usageErr("help", "unknown command %q", name)
				}
				return shown(c)
			}
		})
	}
	app.ExitErrHandler = pointToHelp
	walk(app.Commands, "", func(cmd *cli.Command, full string) {
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			return usageErr(full, "%v", err)
		}
		switch {
		case len(cmd.Subcommands) > 0 && cmd.Action == nil:
			cmd.Action = groupAction(full)
		case cmd.ArgsUsage == "" && cmd.Before == nil && len(cmd.Subcommands) == 0:
			cmd.Before = func(c *cli.Context) error { return wantArgs(c, full, 0, "") }
		}
	})
	return app
}

// pointToHelp is the exit handler: a usage error (64) whose message does not yet point to
// --help (those of bench, or the client library's bad key) gets the pointer, from the
// "latch VERB:" that starts it.
func pointToHelp(_ *cli.Context, err error) {
	if ec, ok := err.(cli.ExitCoder); ok && ec.ExitCode() == exitUsage {
		msg := err.Error()
		if name, _, found := strings.Cut(msg, ": "); found && strings.HasPrefix(name, "latch") && !strings.Contains(msg, "--help") {
			err = cli.Exit(fmt.Sprintf("%s (see %s --help)", msg, name), exitUsage)
		}
	}
	cli.HandleExitCoder(err)
}

func walk(cmds []*cli.Command, prefix string, f func(*cli.Command, string)) {
	for _, cmd := range cmds {
		full := strings.TrimSpace(prefix + " " + cmd.Name)
		f(cmd, full)
		walk(cmd.Subcommands, full, f)
	}
}

// groupAction is the action of the root and of a command group: without a verb it prints the
// help (on standard error) and exits 64; with an unknown one it says so.
func groupAction(full string) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.Args().Present() {
			return usageErr(full, "unknown command %q", c.Args().First())
		}
		w := c.App.Writer
		c.App.Writer = c.App.ErrWriter
		if full == "" {
			cli.ShowAppHelp(c)
		} else {
			cli.ShowSubcommandHelp(c)
		}
		c.App.Writer = w
		return cli.Exit("", exitUsage)
	}
}

// requireFlags refuses a call of verb that lacks one of the named flags (flag or LATCH_*).
func requireFlags(c *cli.Context, verb string, names ...string) error {
	var missing []string
	for _, n := range names {
		if !c.IsSet(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return usageErr(verb, "missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// wantArgs refuses a call of verb whose arguments are not exactly n, saying what it wants
// (usage, e.g. "KEY TOKEN"); a flag after the arguments gets its own message.
func wantArgs(c *cli.Context, verb string, n int, usage string) error {
	for i, a := range c.Args().Slice() {
		if i > 0 && strings.HasPrefix(a, "-") && len(a) > 1 && strings.Trim(a[1:], "0123456789") != "" { // -1 is a (bad) number
			return usageErr(verb, "flag %s after %s: flags go before the arguments", a, c.Args().Get(i-1))
		}
	}
	if c.NArg() != n {
		if usage == "" {
			return usageErr(verb, "takes no arguments, got %q", c.Args().Slice())
		}
		return usageErr(verb, "want %s, got %d arguments", usage, c.NArg())
	}
	return nil
}
