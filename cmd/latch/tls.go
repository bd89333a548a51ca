package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

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
			"with --tls-ca, a client certificate that CA signed authorizes admin changes, as the secret does", EnvVars: env("HTTP_TLS")},
	}
}

// serverTLS holds the TLS configurations the server flags ask for.
type serverTLS struct {
	client     *tls.Config // client port (nil: plain)
	peer, dial *tls.Config // peer port listener and dialer (nil: no TLS between peers)
	http       *tls.Config // --http listener (nil: plain HTTP)
	// httpCerts: --http verifies client certificates against the cluster CA, and a verified
	// one authorizes admin changes.
	httpCerts bool
	// admin is this node's TLS for its own admin calls to an https:// --join: the cluster CA
	// (system roots without --tls-ca) and its certificate as a client certificate.
	admin *tls.Config
}

// loadServerTLS reads --tls-cert, --tls-key and --tls-ca.
func loadServerTLS(c *cli.Context) (serverTLS, error) {
	certFile, keyFile, caFile := c.String("tls-cert"), c.String("tls-key"), c.String("tls-ca")
	var out serverTLS
	if certFile == "" && keyFile == "" {
		switch {
		case caFile != "":
			return out, errors.New("--tls-ca needs --tls-cert and --tls-key: the node's own certificate, signed by that CA")
		case c.Bool("http-tls"):
			return out, errors.New("--http-tls needs --tls-cert and --tls-key: the certificate --http serves")
		}
		return out, nil
	}
	if certFile == "" || keyFile == "" {
		return out, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return out, fmt.Errorf("--tls-cert/--tls-key: %w", err)
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
		if pool != nil {
			// Probes and scrapers present no certificate; a presented one must verify.
			out.http.ClientAuth, out.http.ClientCAs, out.httpCerts = tls.VerifyClientCertIfGiven, pool, true
		}
	}
	return out, nil
}

// loadCA reads a PEM bundle into a pool.
func loadCA(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// adminTLS is the TLS config of the admin verbs for an https:// --http: the server is
// verified against --tls-ca (system roots without it), for its host or --tls-server-name,
// and --tls-cert/--tls-key, if given, are presented as a client certificate (which
// authorizes changes on a node with --http-tls and --tls-ca).
func adminTLS(c *cli.Context) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.String("tls-server-name")}
	if f := c.String("tls-ca"); f != "" {
		pool, err := loadCA(f)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	certFile, keyFile := c.String("tls-cert"), c.String("tls-key")
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("--tls-cert and --tls-key go together")
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
