package main

import "github.com/urfave/cli/v2"

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
