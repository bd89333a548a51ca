package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/creds"
	"github.com/latchd/latch/cluster/member"
	"github.com/latchd/latch/cluster/server"
)

// clusterFlags are the server flags that only cluster mode reads.
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "id", Usage: "this node's stable, unique `ID` (cluster mode), e.g. the pod name", EnvVars: env("ID")},
		&cli.StringFlag{Name: "data-dir", Usage: "`DIR` for the Raft log, votes and snapshots (cluster mode)", EnvVars: env("DATA_DIR")},
		&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7401", Usage: "peer `ADDR` to listen on: Raft and forwarding (cluster mode)", EnvVars: env("RAFT_ADDR")},
		&cli.StringFlag{Name: "advertise", DefaultText: "--raft-addr", Usage: "the peer `ADDR` other nodes dial; may be a DNS name", EnvVars: env("ADVERTISE")},
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

// memberConfig turns the cluster flags, the loaded credentials and TLS configs, and the
// node's and server's configs into a member.Config.
func memberConfig(c *cli.Context, log hclog.Logger, cred creds.Secrets, tlsCfg creds.TLS, node cluster.Config, srv server.Config) (member.Config, error) {
	initial, err := member.ParseInitialCluster(c.String("initial-cluster"))
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
