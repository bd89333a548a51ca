// Package launch starts a latch server of either mode from its settings as an operator gives
// them (the `latch server` flags): it reads and checks the secret and TLS files, refuses a
// client port that no credential protects off loopback, shares the open-files limit out,
// builds the node's, server's and HTTP side's configs, and starts single mode
// (cluster/single) or a cluster member that serves (cluster/member). Each mode owns its
// readiness and its order of stop; launch only chooses and wires.
//
// What it must never do: parse flags, handle signals or choose exit codes (cmd/latch does,
// mapping ErrSettings and raftnode.ErrDataDirBroken, and giving Config.FailStop), or decide a
// lock request.
package launch

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/cluster/creds"
	"github.com/latchd/latch/cluster/member"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/single"
)

// ErrSettings marks a Start refused for its settings alone (two principals sharing a secret,
// a cluster node with no way to find its members): a usage error, nothing was started.
var ErrSettings = errors.New("settings refused")

// settingsError is err, refused for the settings alone: it reads as err and matches
// ErrSettings too.
type settingsError struct{ error }

func (e settingsError) Unwrap() []error { return []error{e.error, ErrSettings} }

// Config is a server's settings, each named by the flag it comes from.
type Config struct {
	Cluster bool   // --mode cluster; false: single mode
	Listen  string // --listen
	HTTP    string // --http
	// HTTPHosts (--http-allowed-host): names besides the node's own that --http answers to.
	HTTPHosts []string
	Secrets   creds.SecretFiles // --secret-file, --peer-secret-file, --admin-secret-file
	TLS       creds.TLSFiles    // --tls-cert, --tls-key, --tls-ca, --http-tls, --admin-tls-ca
	Insecure  bool              // --insecure
	MaxConns  int               // --max-conns
	// MaxConnsSet: --max-conns was given, so it must fit the open-files limit as it is
	// (left at its default, it is lowered to fit, with a warning).
	MaxConnsSet bool
	Pprof       bool // --pprof
	// Node holds the lock node's limits and token floor (--max-pending, --max-keys,
	// --max-waiters, --token-floor) and Audit (--audit); Start sets its Logger and Metrics.
	Node cluster.Config
	// Member holds cluster mode's own settings (--id, --data-dir, --raft-addr, --advertise,
	// --bootstrap, --initial-cluster, --join, --accept-legacy-peers, --hold-leases); Start
	// fills in the rest. Ignored in single mode.
	Member MemberFlags
	// Build is the binary's build (buildinfo.Get): latch_build_info, /v1/status, the start
	// line, and in cluster mode the data directory's format.json.
	Build  buildinfo.Info
	Logger hclog.Logger
	// FailStop ends the process when a cluster member's data directory fails a write or an
	// fsync (raftnode.Config.FailStop: it must not return). Ignored in single mode.
	FailStop func(error)
}

// MemberFlags are the settings only cluster mode reads.
type MemberFlags struct {
	ID, DataDir, RaftAddr, Advertise, InitialCluster, Join string
	Bootstrap, AcceptLegacyPeers, HoldLeases               bool
}

// Running is a started server of either mode (a *single.Node, or a *member.Member that
// serves), as a caller waits on it and stops it.
type Running interface {
	Addr() net.Addr
	HTTPAddr() net.Addr
	Hosts() admin.Hosts
	Failed() <-chan error
	Stop(ctx context.Context) error
}

// Start starts the server cfg describes and logs one line saying what it serves. ctx bounds
// what a cluster member waits for before it serves (its initial members), not the server's
// life: Stop ends that. A refusal for the settings alone wraps ErrSettings; a damaged data dir,
// raftnode.ErrDataDirBroken.
func Start(ctx context.Context, cfg Config) (Running, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.MaxConns < 1 {
		return nil, fmt.Errorf("--max-conns %d: set it to at least 1", cfg.MaxConns)
	}
	cred, err := creds.LoadSecrets(cfg.Secrets, log)
	if errors.Is(err, creds.ErrSharedSecret) {
		return nil, settingsError{err}
	} else if err != nil {
		return nil, err
	}
	tlsCfg, err := creds.LoadTLS(cfg.TLS, log)
	if err != nil {
		return nil, err
	}
	if err := server.CheckListen(cfg.Listen, len(cred.Client) > 0, cfg.Insecure); err != nil {
		return nil, err
	}
	fds, err := server.FitDescriptors(cfg.MaxConns, cfg.MaxConnsSet, cfg.Cluster, log)
	if err != nil {
		return nil, err
	}
	boot, err := admin.NewBootID()
	if err != nil {
		return nil, err
	}
	node := cfg.Node
	node.Logger, node.Metrics = log.Named("node"), cluster.NewMetrics()
	node.Metrics.SetBuildInfo(cfg.Build)
	srv := server.Config{Secrets: cred.Client, MaxConns: fds.MaxConns, MaxRefusing: fds.Refusing, Logger: log.Named("server"), Metrics: node.Metrics}
	httpCfg := admin.DefaultHTTPConfig() // timeouts, header size and a connection cap
	httpCfg.Logger = log.Named("http")
	httpCfg.MaxConns = fds.HTTP // within the open-files limit, beside the client connections

	var run Running
	if cfg.Cluster {
		mcfg, err := memberConfig(cfg, log, cred, tlsCfg, node, srv, httpCfg)
		if err != nil {
			return nil, err
		}
		mem, err := member.Start(ctx, mcfg)
		if err != nil {
			return nil, err
		}
		if err := mem.Serve(member.ServeConfig{Listen: cfg.Listen, TLS: tlsCfg.Client, Boot: boot, Pprof: cfg.Pprof}); err != nil {
			return nil, err
		}
		run = mem
	} else {
		run, err = single.Start(single.Config{
			Node: node, Server: srv, Listen: cfg.Listen, TLS: tlsCfg.Client,
			HTTP: cfg.HTTP, HTTPTLS: tlsCfg.HTTP, HTTPServer: httpCfg, HTTPHosts: cfg.HTTPHosts,
			Insecure: cfg.Insecure, Pprof: cfg.Pprof, Logger: log,
			Admin: admin.LocalConfig{
				Boot:  boot,
				Admin: admin.Credentials{AdminSecrets: cred.Admin, AdminCAs: tlsCfg.AdminCAs},
				Build: cfg.Build,
				// The rule of cluster mode's checkPrincipals: a client or peer credential.
				Credentialed: len(cred.Client) > 0 || len(cred.Peer) > 0 || tlsCfg.Peer != nil,
			},
		})
		if err != nil {
			return nil, err
		}
	}
	mode := map[bool]string{false: "single", true: "cluster"}[cfg.Cluster]
	log.Info("latch serving", "mode", mode, "listen", run.Addr().String(), "http", run.HTTPAddr().String(),
		"auth", len(cred.Client) > 0, "secrets", len(cred.Client), "peer_secrets", len(cred.Peer), "admin_secrets", len(cred.Admin),
		"admin_certs", tlsCfg.AdminCAs != nil, "tls", tlsCfg.Client != nil, "max_conns", fds.MaxConns, "open_files_limit", fds.Limit,
		"http_tls", tlsCfg.HTTP != nil, "http_hosts", run.Hosts().Names(), "peer_mtls", tlsCfg.Peer != nil, "token_floor", node.TokenFloor, "version", cfg.Build.Version)
	return run, nil
}

// memberConfig is the member.Config of cfg, the loaded credentials and TLS configs, and the
// node's and server's configs; a node with no way to find its members is refused
// (ErrSettings).
func memberConfig(cfg Config, log hclog.Logger, cred creds.Secrets, tlsCfg creds.TLS, node cluster.Config, srv server.Config, hc admin.HTTPConfig) (member.Config, error) {
	f := cfg.Member
	initial, err := member.ParseInitialCluster(f.InitialCluster)
	if err != nil {
		return member.Config{}, err
	}
	m := member.DefaultConfig()
	m.Node, m.Server, m.Logger = node, srv, log
	m.Raft.ID, m.Raft.DataDir, m.Raft.Advertise = f.ID, f.DataDir, f.Advertise
	m.Build = cfg.Build
	m.Raft.Bootstrap, m.Raft.InitialCluster = f.Bootstrap, initial
	m.Raft.FailStop = cfg.FailStop
	// The peer port takes the peer secrets only: the client secret opens none of it.
	m.Peer.Secrets, m.Peer.TLS, m.Peer.ClientTLS = cred.Peer, tlsCfg.Peer, tlsCfg.Dial
	m.Listen, m.Join, m.JoinTLS = f.RaftAddr, f.Join, tlsCfg.Admin
	m.HTTP, m.HTTPTLS, m.HTTPHosts, m.HTTPServer = cfg.HTTP, tlsCfg.HTTP, cfg.HTTPHosts, hc
	m.AcceptLegacyPeers, m.Insecure, m.HoldLeases = f.AcceptLegacyPeers, cfg.Insecure, f.HoldLeases
	m.Admin = admin.Credentials{AdminSecrets: cred.Admin, PeerSecrets: cred.Peer, AdminCAs: tlsCfg.AdminCAs, PeerCAs: tlsCfg.PeerCAs}
	if err := m.ValidateStart(); err != nil {
		return member.Config{}, settingsError{err}
	}
	return m, nil
}
