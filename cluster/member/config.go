package member

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/cluster/server"
)

// Config configures a Member. Build one with DefaultConfig, set Raft.ID, Raft.DataDir and
// Listen, and the credentials; Start calls Validate. The sub-configs are the packages' own;
// Start fills in what wires them together (noted on each field), so leave those unset.
type Config struct {
	// Node configures the lock node: limits, token floor, logger, metrics. Start sets
	// Replicated. Metrics nil: Start makes a set (Member.Metrics returns it).
	Node cluster.Config

	// Raft configures the raft node. Set ID (--id), DataDir (--data-dir), and Advertise
	// (--advertise; empty: this node's address in InitialCluster, else Listen). Bootstrap
	// (--bootstrap) makes a one-node cluster; InitialCluster (--initial-cluster) is the
	// list every initial member starts with: Start passes it on to raft only when it has
	// decided to bootstrap (bootstrap.go). Start sets Stream, TokenFloor (Node.TokenFloor),
	// Logger, Version (Build.Version), Vouch, OnLeader and OnFollower.
	Raft raftnode.Config

	// Peer configures the peer port: set Secrets (--peer-secret-file) and TLS and ClientTLS
	// (mutual TLS between peers). Start sets ID, Advertise and Logger.
	Peer peer.Config

	// Forward configures the follower's link to the leader. Start sets Dial, Now, Logger and
	// Origins.
	Forward forward.Config

	// Server configures the client-protocol server whose sessions the forwarded connections
	// join: set Secrets, MaxConns, Logger, Metrics. Start sets Router.
	Server server.Config

	// Listen is the peer port's address (--raft-addr): Raft, forwarding and the admin
	// channel. Required.
	Listen string

	// Build is the running binary's build (buildinfo.Get): /v1/status shows it, and Start
	// sets Raft.Version to its version (the data directory's format.json).
	Build buildinfo.Info

	// Join is the --http of any member (--join): the cluster is asked to add this node.
	// JoinTLS is the TLS config for an https:// Join.
	Join    string
	JoinTLS *tls.Config

	// HTTP (--http) is the member's admin address, served by the caller: Validate refuses a
	// non-loopback one that nothing authenticates (AdminAuthenticated), unless Insecure.
	// Required. HTTP and HTTPTLS are also where a node that waits for the other initial
	// members before it bootstraps answers /healthz and /readyz meanwhile.
	HTTP    string
	HTTPTLS *tls.Config
	// HTTPServer bounds the HTTP server on HTTP (admin.NewHTTPServer: timeouts, header size,
	// the connection cap), both while the node waits for its initial members and once it
	// serves; zero fields take admin.DefaultHTTPConfig's values.
	HTTPServer admin.HTTPConfig

	// HTTPHosts (--http-allowed-host) are names, besides the node's own, that requests to
	// HTTP may give as Host: a proxy's, or a Service's other than --join's. AdminOptions
	// allows them with IP addresses, localhost and the node's own names (hosts).
	HTTPHosts []string

	// AcceptLegacyPeers admits Raft connections from peers of an older latch that state no
	// identity (--accept-legacy-peers).
	AcceptLegacyPeers bool

	// Insecure allows a non-loopback peer port that nothing authenticates (--insecure).
	Insecure bool

	// HoldLeases makes this member report no support for protocol revision 2: its peer port
	// refuses the revised forward channel, as a latch without the revision does, so the
	// cluster's feature switch (features.go) stays off while it is a member, and the cluster
	// can still be rolled back to a latch without the revision. Followers forward to it in
	// latch/1 while it leads. Once the switch is on, it only makes the links to this member
	// latch/1 (the switch is one-way). latch server --hold-leases.
	HoldLeases bool

	// Admin is what admin calls on HTTP are checked against (AdminOptions' verifier): the
	// operator's --admin-secret-file and --admin-tls-ca, and the peers' --peer-secret-file
	// and --tls-ca for a node's own join. Validate refuses a member that authenticates
	// clients or peers but not the operator (checkPrincipals), and a non-loopback HTTP that
	// nothing authenticates.
	Admin admin.Credentials

	// Logger is the base logger; parts log to named sub-loggers. Nil: no logging.
	Logger hclog.Logger
}

// DefaultConfig returns each part's defaults.
func DefaultConfig() Config {
	return Config{
		Node:    cluster.DefaultConfig(),
		Raft:    raftnode.DefaultConfig(),
		Peer:    peer.DefaultConfig(),
		Forward: forward.DefaultConfig(),
		Server:  server.Config{MaxConns: server.DefaultMaxConns},
	}
}

// ValidateStart is Validate, and refuses a node that could only wait, for ever, to be added:
// no raft state in its data dir, and neither --initial-cluster, --join nor --bootstrap. (A
// node an operator added with `latch peers add` first is started with --join, and finds
// itself listed.) Start itself still lets such a node wait, as tests of that state need.
func (c Config) ValidateStart() error {
	if err := c.Validate(); err != nil {
		return err
	}
	r := c.Raft
	if r.Bootstrap || len(r.InitialCluster) > 0 || c.Join != "" {
		return nil
	}
	if has, err := raftnode.HasState(r.DataDir); err != nil || has {
		return nil // a broken dir is Start's to report (raftnode.ErrDataDirBroken)
	}
	return fmt.Errorf("--data-dir %s holds no raft state, and nothing says how to find the cluster: give --initial-cluster ID=ADDR,... "+
		"(the same list on every initial node), --join ADDR (any member's --http; also for a node already added with latch peers add), "+
		"or --bootstrap (a new one-node cluster)", r.DataDir)
}

// Validate reports the first setting that cannot work, naming the flag to change.
func (c Config) Validate() error {
	r := c.Raft
	if r.ID == "" || r.DataDir == "" {
		return errors.New("cluster mode needs --id and --data-dir")
	}
	if r.Bootstrap && (len(r.InitialCluster) > 0 || c.Join != "") {
		return errors.New("--bootstrap excludes --initial-cluster and --join: use --initial-cluster on every initial node, --join on nodes added later")
	}
	self := c.self()
	if len(r.InitialCluster) > 0 && self < 0 && c.Join == "" {
		return fmt.Errorf("--id %q is not in --initial-cluster: list it there, or give --join ADDR (any member's --http) so the cluster adds it", r.ID)
	}
	if err := c.checkPrincipals(); err != nil {
		return err
	}
	if err := c.checkOpen("--raft-addr", c.Listen, c.Peer.Authenticated(), "a non-loopback peer port",
		"could speak Raft to this node; pass --peer-secret-file FILE or mutual TLS between peers (--tls-cert, --tls-key, --tls-ca)"); err != nil {
		return err
	}
	// HTTP changes the membership and restores backups in cluster mode.
	if err := c.checkOpen("--http", c.HTTP, c.Admin.Operator(), "a non-loopback admin address",
		"could change the membership or replace every lock with a backup; pass --admin-secret-file FILE (or --admin-tls-ca FILE with "+
			"--http-tls, so that admin calls need a client certificate)"); err != nil {
		return err
	}
	if _, err := c.hosts(); err != nil {
		return fmt.Errorf("--http-allowed-host %w", err)
	}
	if c.Join != "" && len(c.Peer.Secrets) == 0 && c.Peer.TLS != nil && !strings.HasPrefix(c.Join, "https://") {
		return fmt.Errorf("--join %s: a node proves its own join with its first --peer-secret-file line, or with its certificate "+
			"over an https:// --join (the cluster's --http-tls): give --peer-secret-file, or join through https://", c.Join)
	}
	if self >= 0 && r.Advertise != "" && r.Advertise != r.InitialCluster[self].Addr {
		return fmt.Errorf("--initial-cluster gives %q the address %q but --advertise is %q: use the same address in both", r.ID, r.InitialCluster[self].Addr, r.Advertise)
	}
	return nil
}

// checkOpen applies the loopback rule (server.CheckListen) to the address of flag: one that
// others can reach and that nothing authenticates is refused, naming what, what anyone who
// reaches it could do and the fix, unless Insecure.
func (c Config) checkOpen(flag, addr string, authenticated bool, what, could string) error {
	err := server.CheckListen(addr, authenticated, c.Insecure)
	if errors.Is(err, server.ErrInsecureListen) {
		return fmt.Errorf("%s %s: refusing %s that nothing authenticates: anyone who can reach it %s, or --insecure if the network is trusted",
			flag, addr, what, could)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

// self is this node's index in the initial cluster, or -1.
func (c Config) self() int {
	return slices.IndexFunc(c.Raft.InitialCluster, func(p raftnode.Peer) bool { return p.ID == c.Raft.ID })
}

// advertise is the peer address other nodes dial: --advertise, else this node's entry in
// --initial-cluster, else --raft-addr.
func (c Config) advertise() string {
	switch i := c.self(); {
	case c.Raft.Advertise != "":
		return c.Raft.Advertise
	case i >= 0:
		return c.Raft.InitialCluster[i].Addr
	}
	return c.Listen
}

// hosts are the names HTTP answers to (admin.Hosts): HTTPHosts and the names this node is
// reached by: the host of --http, of its peer address (advertise: the same machine, another
// port) and of --join, which in Kubernetes is the Service in front of every node that joining
// nodes call, this one included.
func (c Config) hosts() (admin.Hosts, error) {
	h, err := admin.NewHosts(c.HTTP, c.HTTPHosts...)
	return h.With(c.advertise(), c.Join), err
}

// logger returns c.Logger, or one that drops everything.
func (c Config) logger() hclog.Logger {
	if c.Logger == nil {
		return hclog.NewNullLogger()
	}
	return c.Logger
}

// ParseInitialCluster reads --initial-cluster, "id=addr,id=addr": every id once, every addr
// a host:port. Empty is none.
func ParseInitialCluster(s string) ([]raftnode.Peer, error) {
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
