package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster/admin"
)

// adminTargetOf is the target of an admin verb's --http, with its TLS flags.
func adminTargetOf(c *cli.Context) (admin.Remote, error) {
	if c.IsSet("secret-file") {
		return admin.Remote{}, errClientSecretForAdmin
	}
	tc, err := adminTLS(c)
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
	s, err := readSecrets("admin-secret-file", c.String("admin-secret-file"), nil)
	if len(s) == 0 {
		return nil, err
	}
	return s[0], nil
}

// outcomeUnknown reports whether err is the server saying it does not know whether the
// change was applied.
func outcomeUnknown(err error) bool {
	var se *admin.StatusError
	return errors.As(err, &se) && se.Code == admin.StatusOutcomeUnknown
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a node's role, leader, term, indexes, peers and last token",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print the raw JSON"}),
		Action: func(c *cli.Context) error {
			a, err := adminTargetOf(c)
			if err != nil {
				return cli.Exit("latch status: "+err.Error(), exitUsage)
			}
			ctx, cancel := context.WithTimeout(c.Context, adminTimeout)
			defer cancel()
			var st map[string]json.RawMessage
			if err := a.Call(ctx, http.MethodGet, "/v1/status", nil, nil, &st); err != nil {
				return cli.Exit("latch status: "+err.Error(), exitUnavailable)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(st)
			}
			return printStatus(c, st)
		},
	}
}

func printStatus(c *cli.Context, st map[string]json.RawMessage) error {
	var mode string
	var node map[string]any
	json.Unmarshal(st["mode"], &mode)
	json.Unmarshal(st["node"], &node)
	w := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	defer w.Flush()
	fmt.Fprintf(w, "mode\t%s\n", mode)
	if raw, ok := st["raft"]; ok {
		var m map[string]any
		json.Unmarshal(raw, &m)
		get := func(k string) any { return m[k] }
		leader := "none known"
		if id, _ := m["leader_id"].(string); id != "" {
			leader = fmt.Sprintf("%s (%v)", id, get("leader_addr"))
		}
		fmt.Fprintf(w, "id\t%v\nrole\t%v\nleader\t%s\nterm\t%v\ncommit index\t%v\napplied index\t%v\nlast contact\t%v\n",
			get("id"), get("state"), leader, get("term"), get("commit_index"), get("applied_index"), get("last_contact"))
		var peers []admin.Member
		if p, ok := m["peers"]; ok {
			b, _ := json.Marshal(p)
			json.Unmarshal(b, &peers)
		}
		sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
		for _, p := range peers {
			fmt.Fprintf(w, "peer\t%s %s %s\n", p.ID, p.Addr, p.Suffrage)
		}
	}
	fmt.Fprintf(w, "last token\t%v\nkeys\t%v\nwaiters\t%v\n", node["last_token"], node["keys"], node["waiters"])
	return nil
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
					a, err := adminTargetOf(c)
					if err != nil {
						return cli.Exit("latch peers list: "+err.Error(), exitUsage)
					}
					ctx, cancel := context.WithTimeout(c.Context, adminTimeout)
					defer cancel()
					ms, err := a.Members(ctx)
					if err != nil {
						return cli.Exit("latch peers list: "+err.Error(), exitUnavailable)
					}
					w := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
					fmt.Fprintln(w, "ID\tADDR\tSUFFRAGE")
					for _, m := range ms {
						fmt.Fprintf(w, "%s\t%s\t%s\n", m.ID, m.Addr, m.Suffrage)
					}
					return w.Flush()
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
					&cli.StringFlag{Name: "id", Required: true, Usage: "the new member's `ID`"},
					&cli.StringFlag{Name: "raft-addr", Required: true, Usage: "the new member's peer `ADDR`"},
					&cli.BoolFlag{Name: "nonvoter", Usage: "add it without a vote (it replicates, never counts for quorum)"},
				),
				Action: func(c *cli.Context) error {
					return peersChange(c, http.MethodPost, "/v1/peers", admin.AddRequest{ID: c.String("id"), Addr: c.String("raft-addr"), Nonvoter: c.Bool("nonvoter")})
				},
			},
			{
				Name:  "remove",
				Usage: "remove a member by its id",
				Flags: append(adminFlags(), &cli.StringFlag{Name: "id", Required: true, Usage: "the member's `ID`"}),
				Action: func(c *cli.Context) error {
					return peersChange(c, http.MethodDelete, "/v1/peers/"+c.String("id"), nil)
				},
			},
		},
	}
}

func peersChange(c *cli.Context, method, path string, req any) error {
	secret, err := adminSecret(c)
	if err != nil {
		return cli.Exit("latch peers: "+err.Error(), exitUsage)
	}
	a, err := adminTargetOf(c)
	if err != nil {
		return cli.Exit("latch peers: "+err.Error(), exitUsage)
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
			return cli.Exit("latch peers: no answer within "+adminTimeout.String(), exitIndeterminate)
		}
		if outcomeUnknown(err) {
			return cli.Exit("latch peers: "+err.Error(), exitIndeterminate)
		}
		return cli.Exit("latch peers: "+err.Error(), exitUnavailable)
	}
	for k, v := range out {
		fmt.Fprintf(c.App.Writer, "%s %s\n", k, v)
	}
	return nil
}
