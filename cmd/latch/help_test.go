package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
)

// Every default that --help shows is the one the verb applies. Most are the flag's own
// value; those that differ by design (a rule, or another flag's value) are named here, and
// the server's limits come from the packages' own defaults.
func TestHelpDefaultsAreTheRealOnes(t *testing.T) {
	def := cluster.DefaultConfig()
	want := map[string]string{ // verb/flag -> the default help must show
		"run/budget":         runBudgetDefault, // applied by runAction: checked below
		"server/advertise":   "--raft-addr",
		"server/max-pending": fmt.Sprint(def.MaxPending),
		"server/max-keys":    fmt.Sprint(def.MaxKeys),
		"server/max-waiters": fmt.Sprint(def.MaxWaiters),
		"server/max-conns":   fmt.Sprint(server.DefaultMaxConns),
		"acquire/budget":     "0s",
	}
	seen := map[string]bool{}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			name := strings.TrimPrefix(path+" "+cmd.Name, " ")
			if len(cmd.Subcommands) > 0 {
				walk(name, cmd.Subcommands)
			}
			if cmd.Name == "help" || len(cmd.Flags) == 0 {
				continue
			}
			out := helpOf(t, strings.Fields(name)...)
			if _, opts, ok := strings.Cut(out, "\nOPTIONS:\n"); ok {
				out = opts // the flags' lines, not the description's
			}
			for _, f := range cmd.Flags {
				df, ok := f.(cli.DocGenerationFlag)
				if v, vis := f.(cli.VisibleFlag); !ok || vis && !v.IsVisible() {
					continue
				}
				fname := f.Names()[0]
				line := flagLine(out, fname)
				if line == "" {
					t.Errorf("latch %s --help has no line for --%s", name, fname)
					continue
				}
				if strings.Count(line, "(default") > 1 {
					t.Errorf("latch %s --help: --%s states two defaults: %s", name, fname, line)
				}
				shown := defaultIn(line)
				key := cmd.Name + "/" + fname
				if w, ok := want[key]; ok {
					seen[key] = true
					if shown != w {
						t.Errorf("latch %s --help: --%s default %q, want %q", name, fname, shown, w)
					}
				} else if real := df.GetDefaultText(); df.TakesValue() && real != "" && shown != strings.Trim(real, `"`) {
					t.Errorf("latch %s --help: --%s default %q, but the flag's value is %q", name, fname, shown, real)
				}
			}
		}
	}
	walk("", newApp().Commands)
	for k := range want {
		if !seen[k] {
			t.Errorf("no flag %s in any verb's help", k)
		}
	}

	// run's --budget default is --kill-grace + 1s: with --lease 5s and --kill-grace 4s it is 5s,
	// not below the lease, so run refuses before it dials; 3s of grace leaves it below.
	if code, msg := runApp(t, "run", "--servers", "127.0.0.1:1", "--lease", "5s", "--kill-grace", "4s", "k", "--", "true"); code != exitUsage ||
		!strings.Contains(msg, "--budget (default: "+runBudgetDefault+") 5s must be below --lease 5s") {
		t.Errorf("run with the default budget equal to the lease: exit %d, %q", code, msg)
	}
	if code, msg := runApp(t, "run", "--servers", "127.0.0.1:1", "--wait", "0s", "--lease", "5s", "--kill-grace", "3s", "k", "--", "true"); code != exitUnavailable {
		t.Errorf("run with the default budget 4s below --lease 5s: exit %d, want %d (refused by no server, not by the budget): %q", code, exitUnavailable, msg)
	}
}

// helpOf is the --help text of the verb args, run in this process.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	if err := app.Run(append(append([]string{"latch"}, args...), "--help")); err != nil {
		t.Fatalf("latch %s --help: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

// runApp runs latch with args in this process and returns the exit code and what it said.
func runApp(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {} // no os.Exit: the code is read from the error
	err := app.Run(append([]string{"latch"}, args...))
	if err == nil {
		return 0, out.String()
	}
	return exitCode(err), out.String() + err.Error()
}

// flagLine is the help line of --name (from its start to the next flag's).
func flagLine(help, name string) string {
	m := regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(name) + `\b.*$`).FindString(help)
	return strings.TrimSpace(m)
}

// defaultIn is what a help line gives as its default: "(default: X)", or "" when none.
func defaultIn(line string) string {
	m := regexp.MustCompile(`\(default: (.*?)\)( \[\$|$)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"`)
}
