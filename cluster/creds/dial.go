package creds

import (
	"crypto/tls"
	"fmt"
)

// The CLI's side: how its verbs verify servers and prove themselves over TLS.

// DialFiles name the TLS files of a client of latch (the CLI's client and admin verbs).
type DialFiles struct {
	CA         string // --tls-ca: the CA that signed the servers' certificates
	ServerName string // --tls-server-name: the name to check instead of the host dialled
	Cert, Key  string // --tls-cert, --tls-key: a client certificate to present (admin verbs)
}

// ClientTLS is the TLS config of the client verbs: a CA means TLS, verifying the server
// against it, for the host dialled or ServerName; no CA means plain TCP (nil).
func ClientTLS(f DialFiles) (*tls.Config, error) {
	if f.CA == "" {
		return nil, nil
	}
	return AdminTLS(DialFiles{CA: f.CA, ServerName: f.ServerName})
}

// AdminTLS is the TLS config of the admin verbs for an https:// --http: the server is
// verified against CA (the system's roots without it), for its host or ServerName, and
// Cert and Key, if given, are presented as a client certificate (which authorizes admin
// calls on a node whose --admin-tls-ca signed it).
func AdminTLS(f DialFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pool, err := LoadCA(f.CA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" || f.Key != "" {
		cert, err := LoadKeyPair(f.Cert, f.Key, nil)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
