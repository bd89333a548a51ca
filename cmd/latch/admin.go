package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster/admin"
)

// adminTarget is a node's --http as admin calls reach it: "host:port" or "http://host:port"
// is plain HTTP, "https://host:port" is TLS.
type adminTarget struct {
	base string      // scheme://host:port
	tls  *tls.Config // for https:// (nil: the system's roots, no client certificate)
}

// newAdminTarget returns the target for addr; tc is the TLS config for https://.
func newAdminTarget(addr string, tc *tls.Config) adminTarget {
	if rest, ok := strings.CutPrefix(addr, "https://"); ok {
		return adminTarget{base: "https://" + rest, tls: tc}
	}
	return adminTarget{base: "http://" + strings.TrimPrefix(addr, "http://")}
}

// client returns the HTTP client of one admin call, and the func that closes its
// connection. Every call has a connection of its own: --join behind a Service (or a DNS name
// with several nodes) then reaches another node on each retry instead of sticking to the
// one its first connection went to. Within the call the connection is kept, so that a
// signed call asks /v1/status of the same node it then sends the call to.
func (a adminTarget) client() (*http.Client, func()) {
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxConnsPerHost: 1, TLSClientConfig: a.tls}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections
}

// adminTargetOf is the target of an admin verb's --http, with its TLS flags.
func adminTargetOf(c *cli.Context) (adminTarget, error) {
	if c.IsSet("secret-file") {
		return adminTarget{}, errClientSecretForAdmin
	}
	tc, err := adminTLS(c)
	if err != nil {
		return adminTarget{}, err
	}
	return newAdminTarget(c.String("http"), tc), nil
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

// callSigned sends an admin request (signed, when secret is set) for path (and query) to a
// and decodes a JSON answer into out, turning an {"error": ...} answer into an error.
func callSigned(ctx context.Context, a adminTarget, method, path string, body, secret []byte, out any) error {
	_, data, err := doSigned(ctx, a, method, path, body, secret, 1<<20)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// doSigned sends an admin request and returns the answer's headers and body (at most limit
// bytes), turning a non-2xx answer into an error. With secret, it first asks the node's
// /v1/status for its id and boot id, on the same connection, and signs the call for them:
// a signature is good on that node, in that run, once.
func doSigned(ctx context.Context, a adminTarget, method, path string, body, secret []byte, limit int64) (http.Header, []byte, error) {
	hc, done := a.client()
	defer done()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if secret != nil {
		var to admin.Target
		if err := getJSON(ctx, hc, a.base+"/v1/status", &to); err != nil {
			return nil, nil, fmt.Errorf("asking the node which run to sign for (GET /v1/status): %w", err)
		}
		if err := admin.Sign(req, secret, to, admin.Digest(body), time.Now()); err != nil {
			return nil, nil, err
		}
	}
	return do(hc, req, limit)
}

// getJSON GETs url with hc and decodes the JSON answer into out.
func getJSON(ctx context.Context, hc *http.Client, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	_, data, err := do(hc, req, 1<<20)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// do sends req and returns the answer's headers and body (at most limit bytes), turning a
// non-2xx answer into an error.
func do(hc *http.Client, req *http.Request, limit int64) (http.Header, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, nil, &statusError{code: resp.StatusCode, status: resp.Status, msg: msg}
	}
	return resp.Header, data, nil
}

// listPeers returns the members of the cluster behind a.
func listPeers(ctx context.Context, a adminTarget) ([]admin.Member, error) {
	var ms []admin.Member
	err := callSigned(ctx, a, http.MethodGet, "/v1/peers", nil, nil, &ms)
	return ms, err
}

// statusError is a non-2xx answer of an admin call.
type statusError struct {
	code        int
	status, msg string
}

func (e *statusError) Error() string { return e.status + ": " + e.msg }

// outcomeUnknown reports whether err is the server saying it does not know whether the
// change was applied.
func outcomeUnknown(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == admin.StatusOutcomeUnknown
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
			if err := callSigned(ctx, a, http.MethodGet, "/v1/status", nil, nil, &st); err != nil {
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
		fmt.Fprintf(w, "id\t%v\nrole\t%v\nleader\t%v (%v)\nterm\t%v\ncommit index\t%v\napplied index\t%v\nlast contact\t%v\n",
			get("id"), get("state"), get("leader_id"), get("leader_addr"), get("term"), get("commit_index"), get("applied_index"), get("last_contact"))
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
	fmt.Fprintf(w, "last token\t%v\nkeys\t%v\nwaiters\t%v\n", node["LastToken"], node["Keys"], node["Waiters"])
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
					ms, err := listPeers(ctx, a)
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
	if err := callSigned(ctx, a, method, path, body, secret, &out); err != nil {
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
