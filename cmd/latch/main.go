// Command latch is the one latch binary: the server, and (as they land) the client and admin
// verbs. Each verb group lives in its own file; this package turns flags and LATCH_*
// environment variables into the Configs of the packages that do the work, and holds no
// logic of its own.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/client/supervise"
	"github.com/latchd/latch/cluster/buildinfo"
)

// The build's version, revision and date are set at build time in cluster/buildinfo
// (make build, make release; its doc says how).

func main() {
	if supervise.IsGuard() { // latch run's guard process (client/supervise)
		os.Exit(supervise.GuardMain())
	}
	cli.VersionPrinter = func(c *cli.Context) { buildinfo.Get().Write(c.App.Writer, false) } // latch --version
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "latch:", err)
		os.Exit(exitCode(err))
	}
}

func newApp() *cli.App {
	return withUsage(&cli.App{
		Name:    "latch",
		Usage:   "a lock service with fencing tokens",
		Version: buildinfo.Get().Version,
		Commands: []*cli.Command{
			serverCommand(),
			acquireCommand(),
			releaseCommand(),
			extendCommand(),
			runCommand(),
			pingCommand(),
			benchCommand(),
			statusCommand(),
			locksCommand(),
			peersCommand(),
			snapshotCommand(),
			recoverCommand(),
			versionCommand(),
		},
	})
}

// exitCode is the process status for an error a verb returned: a cli.ExitCoder's own code,
// else 1.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return 1
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, revision, build date and Go version of this binary (as latch_build_info and /v1/status name them)",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print them as a JSON object"}},
		Action: func(c *cli.Context) error {
			return buildinfo.Get().Write(c.App.Writer, c.Bool("json"))
		},
	}
}
