package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/creds"
	"github.com/latchd/latch/cluster/outcome"
)

// adminTimeout bounds one admin call, forwarding to the leader included.
const adminTimeout = 40 * time.Second

func adminFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http", Value: "127.0.0.1:7402", Usage: "`ADDR` of any node's --http: host:port, or https://host:port for a node with --http-tls", EnvVars: env("HTTP")},
		&cli.StringFlag{Name: "admin-secret-file", Usage: "`FILE` whose first line signs admin calls (membership changes, backups, restores): a line of the nodes' --admin-secret-file", EnvVars: env("ADMIN_SECRET_FILE")},
		// Not an admin credential: set, it gets an error saying which flag to use.
		&cli.StringFlag{Name: "secret-file", Hidden: true},
		&cli.StringFlag{Name: "tls-ca", Usage: "PEM `FILE` of the CA that signed the nodes' certificates (https:// --http; default: the system's roots)", EnvVars: env("TLS_CA")},
		&cli.StringFlag{Name: "tls-cert", Usage: "PEM `FILE` of a client certificate to present (https:// --http): signed by the nodes' --admin-tls-ca, it authorizes admin calls", EnvVars: env("TLS_CERT")},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM `FILE` of the client certificate's private key", EnvVars: env("TLS_KEY")},
		&cli.StringFlag{Name: "tls-server-name", Usage: "check the node's certificate for `NAME` instead of the host in --http", EnvVars: env("TLS_SERVER_NAME")},
	}
}

// errClientSecretForAdmin refuses --secret-file on an admin verb.
var errClientSecretForAdmin = errors.New("--secret-file is the client secret and authorizes no admin call: " +
	"pass --admin-secret-file FILE (a line of the nodes' --admin-secret-file); status and peers list need none")

// adminCall runs call against the target of --http (with its TLS flags) and, when signed,
// the first secret of --admin-secret-file (a bad flag, or the client's --secret-file, is a
// usage error of verb), bounded by timeout (0: none beyond the verb's context).
func adminCall(c *cli.Context, verb string, signed bool, timeout time.Duration, call func(ctx context.Context, a admin.Remote, secret []byte) error) error {
	if c.IsSet("secret-file") {
		return usageErr(verb, "%v", errClientSecretForAdmin)
	}
	var secret []byte
	var err error
	if signed {
		if secret, err = creds.ReadSecret("admin-secret-file", c.String("admin-secret-file"), nil); err != nil {
			return usageErr(verb, "%v", err)
		}
	}
	tc, err := creds.AdminTLS(dialFiles(c))
	if err != nil {
		return usageErr(verb, "%v", err)
	}
	ctx := c.Context
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return call(ctx, admin.NewRemote(c.String("http"), tc), secret)
}

// adminExit maps a failed admin call to its exit code: 76 when the node said it does not know
// whether the change was applied, or that it applied part of it (a peers add that left a
// nonvoter that did not catch up), 65 when it refused the request as not applicable (400, 404:
// no such member or a single-mode node, 409, 413), else 69 (unreachable, not authorized,
// unavailable: nothing was applied).
func adminExit(verb string, err error) error {
	code := exitUnavailable
	var se *admin.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case outcome.StatusIndeterminate:
			code = exitIndeterminate
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge:
			code = exitRefused
		}
	}
	return cli.Exit("latch "+verb+": "+err.Error(), code)
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a node's role, leader, term, indexes, peers and last token",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print the raw JSON"}),
		Action: func(c *cli.Context) error {
			return adminCall(c, "status", false, adminTimeout, func(ctx context.Context, a admin.Remote, _ []byte) error {
				var st map[string]json.RawMessage
				if err := a.Call(ctx, http.MethodGet, "/v1/status", nil, nil, &st); err != nil {
					return adminExit("status", err)
				}
				if c.Bool("json") {
					return json.NewEncoder(c.App.Writer).Encode(st)
				}
				return admin.WriteStatus(c.App.Writer, st)
			})
		},
	}
}

func peersCommand() *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "list, add or remove cluster members (through any node; changes go to the leader)",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the members of the cluster configuration",
				Flags: adminFlags(),
				Action: func(c *cli.Context) error {
					return adminCall(c, "peers list", false, adminTimeout, func(ctx context.Context, a admin.Remote, _ []byte) error {
						ms, err := a.Members(ctx)
						if err != nil {
							return adminExit("peers list", err)
						}
						return admin.WriteMembers(c.App.Writer, ms)
					})
				},
			},
			{
				Name:  "add",
				Usage: "add a member: its --id and its --advertise (or --raft-addr) address",
				Description: "A voter joins as a nonvoter and gets its vote once it has caught up with the log, so\n" +
					"it never counts for the quorum before it can acknowledge: start the new node (with\n" +
					"--join ANY-NODE's --http) before or while this waits. If it has not caught up within\n" +
					"about 25 s it is left a nonvoter (it keeps replicating) and this exits 76: run it\n" +
					"again once the node runs, or peers remove it. Refused (409) when another node answers\n" +
					"at --raft-addr.",
				Flags: append(adminFlags(),
					&cli.StringFlag{Name: "id", Usage: "the new member's `ID` (required)"},
					&cli.StringFlag{Name: "raft-addr", Usage: "the new member's peer `ADDR` (required)"},
					&cli.BoolFlag{Name: "nonvoter", Usage: "add it without a vote (it replicates, never counts for quorum)"},
				),
				Action: func(c *cli.Context) error {
					if err := requireFlags(c, "peers add", "id", "raft-addr"); err != nil {
						return err
					}
					return peersChange(c, "peers add", func(ctx context.Context, a admin.Remote, secret []byte) (map[string]string, error) {
						return a.AddPeer(ctx, admin.AddRequest{ID: c.String("id"), Addr: c.String("raft-addr"), Nonvoter: c.Bool("nonvoter")}, secret)
					})
				},
			},
			{
				Name:  "remove",
				Usage: "remove a member by its id",
				Flags: append(adminFlags(), &cli.StringFlag{Name: "id", Usage: "the member's `ID` (required)"}),
				Action: func(c *cli.Context) error {
					if err := requireFlags(c, "peers remove", "id"); err != nil {
						return err
					}
					return peersChange(c, "peers remove", func(ctx context.Context, a admin.Remote, secret []byte) (map[string]string, error) {
						return a.RemovePeer(ctx, c.String("id"), secret)
					})
				},
			},
		},
	}
}

// peersChange makes a membership change and prints what the cluster did.
func peersChange(c *cli.Context, verb string, change func(ctx context.Context, a admin.Remote, secret []byte) (map[string]string, error)) error {
	return adminCall(c, verb, true, adminTimeout, func(ctx context.Context, a admin.Remote, secret []byte) error {
		out, err := change(ctx, a, secret)
		if errors.Is(err, context.DeadlineExceeded) {
			return cli.Exit("latch "+verb+": no answer within "+adminTimeout.String()+"; check latch peers list before retrying", exitIndeterminate)
		} else if err != nil {
			return adminExit(verb, err)
		}
		for k, v := range out {
			fmt.Fprintf(c.App.Writer, "%s %s\n", k, v)
		}
		return nil
	})
}
