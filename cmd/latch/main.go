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
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	if supervise.IsGuard() { // latch run's guard process (client/supervise)
		os.Exit(supervise.GuardMain())
	}
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "latch:", err)
		os.Exit(exitCode(err))
	}
}

func newApp() *cli.App {
	return withUsage(&cli.App{
		Name:    "latch",
		Usage:   "a lock service with fencing tokens",
		Version: version,
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
		Usage: "print the version of this binary",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "latch %s\n", version)
			return nil
		},
	}
}
