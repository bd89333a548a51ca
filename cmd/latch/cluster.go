package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/creds"
	"github.com/latchd/latch/cluster/member"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/cluster/server"
)

// clusterFlags are the server flags that only cluster mode reads.
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "id", Usage: "this node's stable, unique `ID` (cluster mode), e.g. the pod name", EnvVars: env("ID")},
		&cli.StringFlag{Name: "data-dir", Usage: "`DIR` for the Raft log, votes and snapshots (cluster mode)", EnvVars: env("DATA_DIR")},
		&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7401", Usage: "peer `ADDR` to listen on: Raft and forwarding (cluster mode)", EnvVars: env("RAFT_ADDR")},
		&cli.StringFlag{Name: "advertise", Usage: "the peer `ADDR` other nodes dial; may be a DNS name (default: --raft-addr)", EnvVars: env("ADVERTISE")},
		&cli.BoolFlag{Name: "bootstrap", Usage: "start a new one-node cluster (ignored when --data-dir holds state)", EnvVars: env("BOOTSTRAP")},
		&cli.StringFlag{Name: "initial-cluster", Usage: "`ID=ADDR,...`: every initial node starts with the same list; safe to restart with it. " +
			"A listed node with an empty --data-dir bootstraps only once every other listed node answers that it is new too", EnvVars: env("INITIAL_CLUSTER")},
		&cli.StringFlag{Name: "join", Usage: "`ADDR` (--http of any member): ask the cluster to add this node (a nonvoter until it has caught up, then a voter); a member already just rejoins. " +
			"May be given with --initial-cluster: nodes not in the list join, listed ones use it if they find the cluster already exists", EnvVars: env("JOIN")},
		&cli.BoolFlag{Name: "accept-legacy-peers", Usage: "during a rolling upgrade from a latch version whose peers state no node identity in the peer handshake: " +
			"accept their Raft connections (each RPC is still checked against the configuration); remove once every node runs this version", EnvVars: env("ACCEPT_LEGACY_PEERS")},
		&cli.BoolFlag{Name: "hold-leases", Usage: "report no support for protocol revision 2 (grant age, extend), so that the cluster keeps it off " +
			"and can still be rolled back to a latch without it; the switch is one-way: once on, this only makes links to this node latch/1", EnvVars: env("HOLD_LEASES")},
	}
}

// parseInitialCluster reads "id=addr,id=addr".
func parseInitialCluster(s string) ([]raftnode.Peer, error) {
	if s == "" {
		return nil, nil
	}
	var peers []raftnode.Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--initial-cluster: %q is not ID=ADDR", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--initial-cluster: %s: %w", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("--initial-cluster: id %q appears twice", id)
		}
		seen[id] = true
		peers = append(peers, raftnode.Peer{ID: id, Addr: addr})
	}
	return peers, nil
}

// memberConfig turns the cluster flags, the loaded credentials and TLS configs, and the
// node's and server's configs into a member.Config.
func memberConfig(c *cli.Context, log hclog.Logger, cred creds.Secrets, tlsCfg creds.TLS, node cluster.Config, srv server.Config) (member.Config, error) {
	initial, err := parseInitialCluster(c.String("initial-cluster"))
	if err != nil {
		return member.Config{}, err
	}
	cfg := member.DefaultConfig()
	cfg.Node, cfg.Server, cfg.Logger = node, srv, log
	cfg.Raft.ID, cfg.Raft.DataDir, cfg.Raft.Advertise = c.String("id"), c.String("data-dir"), c.String("advertise")
	cfg.Raft.Bootstrap, cfg.Raft.InitialCluster = c.Bool("bootstrap"), initial
	// The peer port takes the peer secrets only: the client secret opens none of it.
	cfg.Peer.Secrets, cfg.Peer.TLS, cfg.Peer.ClientTLS = cred.Peer, tlsCfg.Peer, tlsCfg.Dial
	cfg.Listen, cfg.Join, cfg.JoinTLS = c.String("raft-addr"), c.String("join"), tlsCfg.Admin
	cfg.HTTP, cfg.HTTPTLS, cfg.HTTPHosts = c.String("http"), tlsCfg.HTTP, c.StringSlice("http-allowed-host")
	cfg.AcceptLegacyPeers, cfg.Insecure, cfg.HoldLeases = c.Bool("accept-legacy-peers"), c.Bool("insecure"), c.Bool("hold-leases")
	cfg.Admin = admin.Credentials{AdminSecrets: cred.Admin, PeerSecrets: cred.Peer, AdminCAs: tlsCfg.AdminCAs, PeerCAs: tlsCfg.PeerCAs}
	return cfg, nil
}

// memberNode is a started member with the client and HTTP listeners it is served on.
type memberNode struct {
	mem     *member.Member
	hs      *http.Server
	ln, hln net.Listener
	hosts   admin.Hosts
	served  chan error
}

// startMember starts the member, then serves its client-protocol server on --listen and
// its admin HTTP on --http.
func startMember(ctx context.Context, c *cli.Context, cfg member.Config, tlsCfg creds.TLS, httpCfg admin.HTTPConfig, boot string) (*memberNode, error) {
	mem, err := member.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m := &memberNode{mem: mem, served: make(chan error, 2)}
	if m.ln, err = net.Listen("tcp", c.String("listen")); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	if tlsCfg.Client != nil {
		m.ln = tls.NewListener(m.ln, tlsCfg.Client) // handshakes run in each session, inside its deadline
	}
	if m.hln, err = net.Listen("tcp", c.String("http")); err != nil {
		m.ln.Close()
		return nil, fmt.Errorf("--http: %w", err)
	}
	ready := func() error {
		if mem.Node().Stats().Draining {
			return errors.New("shutting down")
		}
		return mem.Ready()
	}
	// /v1/status names this node and its run (boot): a signed admin call is good for them
	// only. It reveals no key names and no lock contents (docs/SECURITY.md).
	opts := mem.AdminOptions(boot)
	opts.Pprof, m.hosts = c.Bool("pprof"), opts.Hosts
	m.hs, m.hln = admin.NewHTTPServer(admin.Handler(mem.Metrics().Registry, ready, opts), m.hln, httpCfg)
	if tlsCfg.HTTP != nil {
		m.hln = tls.NewListener(m.hln, tlsCfg.HTTP) // inside the cap, which counts TCP connections
	}
	go func() { m.served <- mem.Server().Serve(m.ln) }()
	go func() { m.served <- m.hs.Serve(m.hln) }()
	return m, nil
}

func (m *memberNode) Addr() net.Addr       { return m.ln.Addr() }
func (m *memberNode) HTTPAddr() net.Addr   { return m.hln.Addr() }
func (m *memberNode) Hosts() admin.Hosts   { return m.hosts }
func (m *memberNode) Failed() <-chan error { return m.served }

// Stop stops the member (member.Stop's order), then HTTP.
func (m *memberNode) Stop(ctx context.Context) error {
	err := m.mem.Stop(ctx)
	m.hs.Shutdown(ctx)
	return err
}
