package main

import (
	"github.com/urfave/cli/v2"

	"github.com/latchd/latch/cluster/creds"
)

// tlsFlags are the server's TLS flags (creds.TLSFiles).
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

// dialFiles are the TLS flags of the client and admin verbs (creds.ClientTLS, creds.AdminTLS).
func dialFiles(c *cli.Context) creds.DialFiles {
	return creds.DialFiles{CA: c.String("tls-ca"), ServerName: c.String("tls-server-name"), Cert: c.String("tls-cert"), Key: c.String("tls-key")}
}
