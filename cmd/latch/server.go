package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/cluster/creds"
	"github.com/latchd/latch/cluster/launch"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cmd/internal/gctune"
	"github.com/latchd/latch/cmd/internal/logs"
	"github.com/latchd/latch/wire"
)

// shutdownGrace bounds how long SIGTERM waits for sessions to flush and close.
const shutdownGrace = 10 * time.Second

func env(name string) []string { return []string{"LATCH_" + name} }

func serverCommand() *cli.Command {
	def := cluster.DefaultConfig()
	cmd := &cli.Command{
		Name:  "server",
		Usage: "run a latch server",
		Description: "Serves the latch protocol on --listen and health, readiness and Prometheus metrics on --http.\n" +
			"Single mode keeps the lock table in memory: tokens are monotonic for the life of the process;\n" +
			"restart with --token-floor above the last token you saw to keep them rising across restarts.\n" +
			"Every flag can also be set with the LATCH_* environment variable named in its help.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "mode", Value: "single", Usage: "single (in memory, one process) or cluster (Raft, three or five nodes)", EnvVars: env("MODE")},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7400", Usage: "client `ADDR` (host:port)", EnvVars: env("LISTEN")},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:7402", Usage: "health, metrics and admin API `ADDR` (host:port)", EnvVars: env("HTTP")},
			&cli.StringSliceFlag{Name: "http-allowed-host", Usage: "a `NAME` that admin calls to --http may give as their Host, besides IP addresses, localhost " +
				"and the node's own names (the host of --http, the hostname when --http is 0.0.0.0, and in cluster mode the hosts of --advertise and --join): " +
				"a proxy's or a Service's name. Repeat it, or separate names with commas. Other names are refused (421), against DNS rebinding; " +
				"/healthz, /readyz and /metrics take any Host", EnvVars: env("HTTP_ALLOWED_HOST")},
			&cli.StringFlag{Name: "secret-file", Usage: "`FILE` of the client secrets, one per line (at least 32 bytes each): clients must prove one. It opens the client port only", EnvVars: env("SECRET_FILE")},
			&cli.StringFlag{Name: "peer-secret-file", Usage: "`FILE` of the peer secrets (cluster mode; same format): nodes prove the first to each other, every line is accepted. Clients must not hold it", EnvVars: env("PEER_SECRET_FILE")},
			&cli.StringFlag{Name: "admin-secret-file", Usage: "`FILE` of the admin secrets (same format): admin calls (lock inspection and release; in cluster mode membership, backups, restores) are signed with one. " +
				"A single-mode node with another credential and none of this turns the lock calls off", EnvVars: env("ADMIN_SECRET_FILE")},
			&cli.BoolFlag{Name: "allow-shared-secrets", Usage: "start although two of the secret files hold the same secret (refused otherwise: " +
				"whoever holds it passes for both principals); only for the rolls of the move from one secret to three", EnvVars: env("ALLOW_SHARED_SECRETS")},
			&cli.BoolFlag{Name: "insecure", Usage: "allow non-loopback addresses that no credential protects", EnvVars: env("INSECURE")},
			&cli.IntFlag{Name: "max-pending", Value: def.MaxPending, Usage: "hard limit of unanswered acquires, waiters included: admission closes at 90% of it (answers B) and reopens below 75%", EnvVars: env("MAX_PENDING")},
			&cli.IntFlag{Name: "max-keys", Value: def.MaxKeys, Usage: "hard limit of held keys: acquires of new keys are answered B from 90% of it and again admitted below 75%; size it about 1.2x the keys you expect", EnvVars: env("MAX_KEYS")},
			&cli.IntFlag{Name: "max-waiters", Value: def.MaxWaiters, Usage: "hard limit of queued waiters: acquires that would wait are answered B from 90% of it and again admitted below 75%", EnvVars: env("MAX_WAITERS")},
			&cli.IntFlag{Name: "max-conns", Value: server.DefaultMaxConns, Usage: "most client connections at once; more are answered E unavailable. " +
				"It must fit the open-files limit, which the server raises to its hard limit: left at its default, it is lowered to fit (with a warning)", EnvVars: env("MAX_CONNS")},
			&cli.Uint64Flag{Name: "token-floor", Usage: fmt.Sprintf("the first token is `N`+1 (0..%d)", wire.MaxToken), EnvVars: env("TOKEN_FLOOR")},
			&cli.BoolFlag{Name: "audit", Usage: "log every grant, release, expiry and forced release as one line (logger latch.audit, at INFO whatever --log-level says)", EnvVars: env("AUDIT")},
			&cli.BoolFlag{Name: "pprof", Usage: "serve Go's profiler under /debug/pprof/ on --http", EnvVars: env("PPROF")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "trace, debug, info, warn or error", EnvVars: env("LOG_LEVEL")},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json (one object per line; durations in seconds)", EnvVars: env("LOG_FORMAT")},
		},
		Action: runServer,
	}
	cmd.Flags = append(cmd.Flags, clusterFlags()...)
	cmd.Flags = append(cmd.Flags, tlsFlags()...)
	return cmd
}

func runServer(c *cli.Context) error {
	log, err := logs.New(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	if c.Args().Present() {
		return fmt.Errorf("server takes no arguments, got %q: flags go before arguments", c.Args().Slice())
	}
	mode := c.String("mode")
	if mode != "single" && mode != "cluster" {
		return fmt.Errorf("--mode %q: use single or cluster", mode)
	}
	if mode == "single" {
		var set []string
		for _, f := range clusterFlags() {
			if name := f.Names()[0]; c.IsSet(name) {
				set = append(set, "--"+name)
			}
		}
		if len(set) > 0 {
			return usageErr("server", "%s: cluster-mode flags, which single mode does not read: it keeps every lock in memory "+
				"(nothing goes to a data dir) and has no peers; drop them, or give --mode cluster", strings.Join(set, ", "))
		}
	}
	if f := c.Uint64("token-floor"); f >= wire.MaxToken {
		return usageErr("server", "--token-floor %d: the counter ends at %d, so no acquire could ever be granted; the floor must be below it", f, wire.MaxToken)
	}
	cfg := launch.Config{
		Cluster: mode == "cluster", Listen: c.String("listen"), HTTP: c.String("http"), HTTPHosts: c.StringSlice("http-allowed-host"),
		Secrets: creds.SecretFiles{Client: c.String("secret-file"), Peer: c.String("peer-secret-file"), Admin: c.String("admin-secret-file"),
			AllowShared: c.Bool("allow-shared-secrets")},
		TLS: creds.TLSFiles{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca"),
			HTTPTLS: c.Bool("http-tls"), AdminCA: c.String("admin-tls-ca")},
		Insecure: c.Bool("insecure"), MaxConns: c.Int("max-conns"), MaxConnsSet: c.IsSet("max-conns"), Pprof: c.Bool("pprof"),
		Node: cluster.Config{MaxPending: c.Int("max-pending"), MaxKeys: c.Int("max-keys"), MaxWaiters: c.Int("max-waiters"), TokenFloor: c.Uint64("token-floor")},
		Member: launch.MemberFlags{ID: c.String("id"), DataDir: c.String("data-dir"), RaftAddr: c.String("raft-addr"), Advertise: c.String("advertise"),
			InitialCluster: c.String("initial-cluster"), Join: c.String("join"), Bootstrap: c.Bool("bootstrap"),
			AcceptLegacyPeers: c.Bool("accept-legacy-peers"), HoldLeases: c.Bool("hold-leases")},
		Build: buildinfo.Get(), Logger: log,
		// A disk that failed a write or an fsync: raftnode has logged it; exit at once, with
		// no other write (no drain, no leadership transfer, no promise written).
		FailStop: func(error) { os.Exit(exitLocalIO) },
	}
	if c.Bool("audit") {
		cfg.Node.Audit = log.Named("audit")
		cfg.Node.Audit.SetLevel(hclog.Info)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go gctune.Run(ctx, log.Named("gc")) // the heap's headroom in proportion to the table
	run, err := launch.Start(ctx, cfg)
	switch {
	case errors.Is(err, launch.ErrSettings):
		return usageErr("server", "%v", err)
	case errors.Is(err, raftnode.ErrDataDirBroken), errors.Is(err, raftnode.ErrDataDirNewer), errors.Is(err, raftnode.ErrDiskFailed):
		return cli.Exit("latch server: "+err.Error(), exitLocalIO)
	case err != nil:
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("signal received; draining", "grace", shutdownGrace)
	case err := <-run.Failed():
		log.Error("listener failed; shutting down", "error", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := run.Stop(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("latch stopped")
	return nil
}
