package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster/peer"
)

// tlsFlags are the server's TLS flags.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", Usage: "PEM `FILE` of this node's certificate: TLS on the client port (and, with --tls-ca, mutual TLS between peers)", EnvVars: env("TLS_CERT")},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM `FILE` of the certificate's private key", EnvVars: env("TLS_KEY")},
		&cli.StringFlag{Name: "tls-ca", Usage: "PEM `FILE` of the cluster CA: peers must present a certificate it signed (mutual TLS on --raft-addr)", EnvVars: env("TLS_CA")},
		&cli.BoolFlag{Name: "http-tls", Usage: "serve --http over TLS with --tls-cert (probes and scrapes then use HTTPS, admin calls an https:// address); " +
			"a client certificate of --admin-tls-ca authorizes admin calls, one of --tls-ca only a node's own join", EnvVars: env("HTTP_TLS")},
		&cli.StringFlag{Name: "admin-tls-ca", Usage: "PEM `FILE` of the admin CA (with --http-tls): a client certificate it signed authorizes every admin call, " +
			"as --admin-secret-file does. Keep it apart from --tls-ca, or peers' certificates authorize admin calls too", EnvVars: env("ADMIN_TLS_CA")},
	}
}

// serverTLS holds the TLS configurations the server flags ask for.
type serverTLS struct {
	client     *tls.Config // client port (nil: plain)
	peer, dial *tls.Config // peer port listener and dialer (nil: no TLS between peers)
	http       *tls.Config // --http listener (nil: plain HTTP)
	// peerCAs (--tls-ca) and adminCAs (--admin-tls-ca) verify client certificates on an
	// --http-tls port: a peer's authorizes its own join, the operator's every admin call.
	// Nil where the port does not verify them.
	peerCAs, adminCAs *x509.CertPool
	// admin is this node's TLS for its own admin calls to an https:// --join: the cluster CA
	// (system roots without --tls-ca) and its certificate as a client certificate.
	admin *tls.Config
}

// loadServerTLS reads --tls-cert, --tls-key, --tls-ca and --admin-tls-ca.
func loadServerTLS(c *cli.Context, log hclog.Logger) (serverTLS, error) {
	certFile, keyFile, caFile := c.String("tls-cert"), c.String("tls-key"), c.String("tls-ca")
	var out serverTLS
	if c.String("admin-tls-ca") != "" && !c.Bool("http-tls") {
		return out, errors.New("--admin-tls-ca needs --http-tls: admin certificates are presented to an https:// --http")
	}
	if certFile == "" && keyFile == "" {
		switch {
		case caFile != "":
			return out, errors.New("--tls-ca needs --tls-cert and --tls-key: the node's own certificate, signed by that CA")
		case c.Bool("http-tls"):
			return out, errors.New("--http-tls needs --tls-cert and --tls-key: the certificate --http serves")
		}
		return out, nil
	}
	cert, err := loadKeyPair(certFile, keyFile, log)
	if err != nil {
		return out, err
	}
	out.client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	out.admin = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	var pool *x509.CertPool
	if caFile != "" {
		if pool, err = loadCA(caFile); err != nil {
			return out, fmt.Errorf("--tls-ca: %w", err)
		}
		out.peer, out.dial = peer.MutualTLS(cert, pool)
		out.admin.RootCAs = pool
	}
	if c.Bool("http-tls") {
		out.http = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		out.peerCAs = pool
		if f := c.String("admin-tls-ca"); f != "" {
			if out.adminCAs, err = loadCA(f); err != nil {
				return out, fmt.Errorf("--admin-tls-ca: %w", err)
			}
		}
		if either, _ := loadCA(caFile, c.String("admin-tls-ca")); either != nil {
			// Probes and scrapers present no certificate; a presented one must verify against
			// either CA (the admin verifier then tells which).
			out.http.ClientAuth, out.http.ClientCAs = tls.VerifyClientCertIfGiven, either
		}
	}
	return out, nil
}

// loadKeyPair reads a certificate and its private key; the key file must not be writable
// by others (readKeyFile).
func loadKeyPair(certFile, keyFile string, log hclog.Logger) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, errors.New("--tls-cert and --tls-key go together")
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := readKeyFile("tls-key", keyFile, log)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return cert, nil
}

// loadCA reads PEM bundles into one pool; empty names are skipped, and none at all is a nil
// pool.
func loadCA(files ...string) (*x509.CertPool, error) {
	var pool *x509.CertPool
	for _, file := range files {
		if file == "" {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("%s holds no PEM certificate", file)
		}
	}
	return pool, nil
}

// adminTLS is the TLS config of the admin verbs for an https:// --http: the server is
// verified against --tls-ca (system roots without it), for its host or --tls-server-name,
// and --tls-cert/--tls-key, if given, are presented as a client certificate (which
// authorizes admin calls on a node whose --admin-tls-ca signed it).
func adminTLS(c *cli.Context) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.String("tls-server-name")}
	if f := c.String("tls-ca"); f != "" {
		pool, err := loadCA(f)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	if certFile, keyFile := c.String("tls-cert"), c.String("tls-key"); certFile != "" || keyFile != "" {
		cert, err := loadKeyPair(certFile, keyFile, nil)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// clientTLS is the TLS config of the client verbs: --tls-ca set means TLS, verifying the
// server against that CA, for the host it dials or --tls-server-name.
func clientTLS(c *cli.Context) (*tls.Config, error) {
	f := c.String("tls-ca")
	if f == "" {
		return nil, nil
	}
	pool, err := loadCA(f)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: c.String("tls-server-name")}, nil
}
