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
)

// adminTargetOf is the target of an admin verb's --http, with its TLS flags.
func adminTargetOf(c *cli.Context) (admin.Remote, error) {
	if c.IsSet("secret-file") {
		return admin.Remote{}, errClientSecretForAdmin
	}
	tc, err := creds.AdminTLS(dialFiles(c))
	if err != nil {
		return admin.Remote{}, err
	}
	return admin.NewRemote(c.String("http"), tc), nil
}

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

// adminSecret is the first secret of --admin-secret-file, or nil.
func adminSecret(c *cli.Context) ([]byte, error) {
	if c.IsSet("secret-file") {
		return nil, errClientSecretForAdmin
	}
	return firstSecret(c, "admin-secret-file")
}

// signedAdminTarget is the signing secret and the target of an admin verb that changes or
// reads what only the admin credential may.
func signedAdminTarget(c *cli.Context) ([]byte, admin.Remote, error) {
	secret, err := adminSecret(c)
	if err != nil {
		return nil, admin.Remote{}, err
	}
	a, err := adminTargetOf(c)
	return secret, a, err
}

// callAdmin runs call against the target of --http (a bad one is a usage error of verb),
// bounded by adminTimeout.
func callAdmin(c *cli.Context, verb string, call func(ctx context.Context, a admin.Remote) error) error {
	a, err := adminTargetOf(c)
	if err != nil {
		return usageErr(verb, "%v", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, adminTimeout)
	defer cancel()
	return call(ctx, a)
}

// adminExit maps a failed admin call to its exit code: 76 when the node said it does not know
// whether the change was applied, 65 when it refused the request as not applicable (400, 404:
// no such member or a single-mode node, 409, 413), else 69 (unreachable, not authorized,
// unavailable: nothing was applied).
func adminExit(verb string, err error) error {
	code := exitUnavailable
	var se *admin.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case admin.StatusOutcomeUnknown:
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
			return callAdmin(c, "status", func(ctx context.Context, a admin.Remote) error {
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
					return callAdmin(c, "peers list", func(ctx context.Context, a admin.Remote) error {
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
					"it never counts for the quorum before it can acknowledge: start the new node (with no\n" +
					"--bootstrap, --initial-cluster or --join) before or while this waits. If it has not\n" +
					"caught up within about 25 s it stays a nonvoter (it keeps replicating): run this\n" +
					"again once it runs. Refused (409) when another node answers at --raft-addr.",
				Flags: append(adminFlags(),
					&cli.StringFlag{Name: "id", Usage: "the new member's `ID` (required)"},
					&cli.StringFlag{Name: "raft-addr", Usage: "the new member's peer `ADDR` (required)"},
					&cli.BoolFlag{Name: "nonvoter", Usage: "add it without a vote (it replicates, never counts for quorum)"},
				),
				Action: func(c *cli.Context) error {
					if err := requireFlags(c, "peers add", "id", "raft-addr"); err != nil {
						return err
					}
					return peersChange(c, "peers add", http.MethodPost, "/v1/peers", admin.AddRequest{ID: c.String("id"), Addr: c.String("raft-addr"), Nonvoter: c.Bool("nonvoter")})
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
					return peersChange(c, "peers remove", http.MethodDelete, "/v1/peers/"+c.String("id"), nil)
				},
			},
		},
	}
}

func peersChange(c *cli.Context, verb, method, path string, req any) error {
	secret, a, err := signedAdminTarget(c)
	if err != nil {
		return usageErr(verb, "%v", err)
	}
	var body []byte
	if req != nil {
		body, _ = json.Marshal(req)
	}
	ctx, cancel := context.WithTimeout(c.Context, adminTimeout)
	defer cancel()
	var out map[string]string
	if err := a.Call(ctx, method, path, body, secret, &out); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return cli.Exit("latch "+verb+": no answer within "+adminTimeout.String()+"; check latch peers list before retrying", exitIndeterminate)
		}
		return adminExit(verb, err)
	}
	for k, v := range out {
		fmt.Fprintf(c.App.Writer, "%s %s\n", k, v)
	}
	return nil
}
