package creds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/peer"
)

// TLSFiles name a server's TLS files and switches.
type TLSFiles struct {
	Cert, Key string // --tls-cert, --tls-key: this node's certificate and its private key
	CA        string // --tls-ca: the cluster CA (mutual TLS between peers)
	HTTPTLS   bool   // --http-tls: serve --http over TLS with Cert
	AdminCA   string // --admin-tls-ca: the admin CA (with HTTPTLS)
}

// TLS holds the TLS configurations a server's TLS files ask for.
type TLS struct {
	Client     *tls.Config // client port (nil: plain)
	Peer, Dial *tls.Config // peer port listener and dialer (nil: no TLS between peers)
	HTTP       *tls.Config // --http listener (nil: plain HTTP)
	// PeerCAs (--tls-ca) and AdminCAs (--admin-tls-ca) verify client certificates on an
	// --http-tls port: a peer's authorizes its own join, the operator's every admin call.
	// Nil where the port does not verify them.
	PeerCAs, AdminCAs *x509.CertPool
	// Admin is this node's TLS for its own admin calls to an https:// --join: the cluster CA
	// (system roots without --tls-ca) and its certificate as a client certificate.
	Admin *tls.Config
}

// LoadTLS reads the TLS files; log receives the key file's warning.
func LoadTLS(f TLSFiles, log hclog.Logger) (TLS, error) {
	var out TLS
	if f.AdminCA != "" && !f.HTTPTLS {
		return out, errors.New("--admin-tls-ca needs --http-tls: admin certificates are presented to an https:// --http")
	}
	if f.Cert == "" && f.Key == "" {
		switch {
		case f.CA != "":
			return out, errors.New("--tls-ca needs --tls-cert and --tls-key: the node's own certificate, signed by that CA")
		case f.HTTPTLS:
			return out, errors.New("--http-tls needs --tls-cert and --tls-key: the certificate --http serves")
		}
		return out, nil
	}
	cert, err := LoadKeyPair(f.Cert, f.Key, log)
	if err != nil {
		return out, err
	}
	out.Client = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	out.Admin = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	var pool *x509.CertPool
	if f.CA != "" {
		if pool, err = LoadCA(f.CA); err != nil {
			return out, fmt.Errorf("--tls-ca: %w", err)
		}
		out.Peer, out.Dial = peer.MutualTLS(cert, pool)
		out.Admin.RootCAs = pool
	}
	if f.HTTPTLS {
		out.HTTP = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		out.PeerCAs = pool
		if f.AdminCA != "" {
			if out.AdminCAs, err = LoadCA(f.AdminCA); err != nil {
				return out, fmt.Errorf("--admin-tls-ca: %w", err)
			}
		}
		if either, _ := LoadCA(f.CA, f.AdminCA); either != nil {
			// Probes and scrapers present no certificate; a presented one must verify against
			// either CA (the admin verifier then tells which).
			out.HTTP.ClientAuth, out.HTTP.ClientCAs = tls.VerifyClientCertIfGiven, either
		}
	}
	return out, nil
}

// LoadKeyPair reads a certificate (--tls-cert) and its private key (--tls-key); the key
// file must not be writable by others (ReadKeyFile). log nil: no warning about a key file
// others may read (the CLI's admin verbs).
func LoadKeyPair(certFile, keyFile string, log hclog.Logger) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, errors.New("--tls-cert and --tls-key go together")
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := ReadKeyFile("tls-key", keyFile, log)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return cert, nil
}

// LoadCA reads PEM bundles into one pool; empty names are skipped, and none at all is a nil
// pool. The caller names the flag in its error.
func LoadCA(files ...string) (*x509.CertPool, error) {
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
