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
	}
}

// serverTLS holds the TLS configurations the server flags ask for.
type serverTLS struct {
	client     *tls.Config // client port (nil: plain)
	peer, dial *tls.Config // peer port listener and dialer (nil: no TLS between peers)
}

// loadServerTLS reads --tls-cert, --tls-key and --tls-ca.
func loadServerTLS(c *cli.Context) (serverTLS, error) {
	certFile, keyFile, caFile := c.String("tls-cert"), c.String("tls-key"), c.String("tls-ca")
	var out serverTLS
	if certFile == "" && keyFile == "" {
		if caFile != "" {
			return out, errors.New("--tls-ca needs --tls-cert and --tls-key: the node's own certificate, signed by that CA")
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
	if caFile != "" {
		pool, err := loadCA(caFile)
		if err != nil {
			return out, fmt.Errorf("--tls-ca: %w", err)
		}
		out.peer, out.dial = peer.MutualTLS(cert, pool)
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
