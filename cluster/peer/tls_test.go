package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

func TestMutualTLS(t *testing.T) {
	ca := newCA(t, "cluster")
	for _, mode := range []struct {
		name    string
		secrets [][]byte
	}{{"tls", nil}, {"tls and secret", [][]byte{secretNew}}} {
		t.Run(mode.name, func(t *testing.T) {
			m := listen(t, ca.config(t, "n1", mode.secrets...))
			c := dial(t, m.Addr().String(), ChannelRaft, ca.config(t, "n2", mode.secrets...))
			s := accept(t, m.Listener(ChannelRaft))
			sayAndHear(t, c, s, "over tls")
			sayAndHear(t, s, c, "and back")
			pc, ok := s.(*Conn)
			if !ok {
				t.Fatalf("accepted %T, want *peer.Conn", s)
			}
			tc, ok := pc.NetConn().(*tls.Conn)
			if !ok {
				t.Fatalf("accepted a connection over %T, want *tls.Conn", pc.NetConn())
			}
			st := tc.ConnectionState()
			if st.Version != tls.VersionTLS13 || len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "n2" {
				t.Fatalf("version %x, peer certs %d: want TLS 1.3 and the dialer's certificate", st.Version, len(st.PeerCertificates))
			}
		})
	}
}

// Whoever cannot show a certificate from the cluster CA gets nothing past TLS, and the
// listener never hands the connection on.
func TestTLSRejects(t *testing.T) {
	ca := newCA(t, "cluster")
	other := newCA(t, "elsewhere")
	cfg := ca.config(t, "n1")
	cfg.HandshakeTimeout = 300 * time.Millisecond // the plain dialer waits for it
	m := listen(t, cfg)
	addr := m.Addr().String()

	noCert := ca.config(t, "n2")
	noCert.ClientTLS = noCert.ClientTLS.Clone()
	noCert.ClientTLS.Certificates = nil
	noCert.ClientTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &tls.Certificate{}, nil // sends no certificate
	}
	otherCert := ca.config(t, "n2")
	otherCert.ClientTLS = otherCert.ClientTLS.Clone()
	intruder := other.node(t, "intruder")
	otherCert.ClientTLS.Certificates = nil
	otherCert.ClientTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &intruder, nil // sent although the listener asks for the cluster CA
	}
	otherRoots := other.config(t, "intruder") // trusts only its own CA, so also refuses n1

	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"client without a certificate", noCert},
		{"client certificate from another CA", otherCert},
		{"client of another cluster", otherRoots},
		{"plain dialer", testConfig(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := dialErr(t, addr, ChannelRaft, tc.cfg); err == nil {
				t.Fatal("Dial succeeded")
			} else {
				t.Logf("Dial: %v", err)
			}
		})
	}
	st := settled(t, m)
	if st.Accepted != 0 || st.Failed != 4 || queued(m, ChannelRaft) != 0 {
		t.Fatalf("stats %+v, queued %d; want 4 failed, none accepted or queued", st, queued(m, ChannelRaft))
	}
}

// A dialer checks the listener's certificate against the address it dials.
func TestTLSDialerChecksServerName(t *testing.T) {
	ca := newCA(t, "cluster")
	m := listen(t, ca.config(t, "n1"))
	cfg := ca.config(t, "n2")
	cfg.ClientTLS = cfg.ClientTLS.Clone()
	cfg.ClientTLS.ServerName = "n9.example" // not in the certificate
	err := dialErr(t, m.Addr().String(), ChannelRaft, cfg)
	var hostErr x509.HostnameError
	if !errors.As(err, &hostErr) {
		t.Fatalf("Dial = %v, want a hostname verification error", err)
	}
}

// TLS dialer to a listener without TLS, and the reverse, fail within the handshake timeout.
func TestTLSModeMismatch(t *testing.T) {
	ca := newCA(t, "cluster")
	plain := listen(t, testConfig(t))
	if err := dialErr(t, plain.Addr().String(), ChannelRaft, ca.config(t, "n2")); err == nil {
		t.Fatal("TLS dialer talked to a plain listener")
	}
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	cfg := ca.config(t, "n1")
	cfg.HandshakeTimeout = 300 * time.Millisecond
	tlsm := listen(t, cfg)
	c, err := Dial(ctx, tlsm.Addr().String(), ChannelRaft, testConfig(t))
	if err == nil {
		_ = c.Close()
		t.Fatal("plain dialer talked to a TLS listener")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Logf("plain dialer gave up at the deadline: %v", err)
	}
}
