package peer

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

func TestValidate(t *testing.T) {
	ca := newCA(t, "cluster")
	good := ca.config(t, "n1", secretNew)
	tests := []struct {
		name   string
		change func(c *Config)
		want   string // substring of the error; "" means valid
	}{
		{"default", func(c *Config) { *c = DefaultConfig() }, ""},
		{"secrets and tls", func(*Config) {}, ""},
		{"zero handshake timeout", func(c *Config) { c.HandshakeTimeout = 0 }, "handshake timeout"},
		{"zero max handshakes", func(c *Config) { c.MaxHandshakes = 0 }, "max handshakes"},
		{"short secret", func(c *Config) { c.Secrets = [][]byte{secretNew, []byte("short")} }, "secret 2 of 2"},
		{"server tls only", func(c *Config) { c.ClientTLS = nil }, "both"},
		{"client tls only", func(c *Config) { c.TLS = nil }, "both"},
		{"client certs not required", func(c *Config) {
			c.TLS = c.TLS.Clone()
			c.TLS.ClientAuth = tls.VerifyClientCertIfGiven
		}, "RequireAndVerifyClientCert"},
		{"server tls 1.2", func(c *Config) {
			c.TLS = c.TLS.Clone()
			c.TLS.MinVersion = tls.VersionTLS12
		}, "TLS13"},
		{"client tls default version", func(c *Config) {
			c.ClientTLS = c.ClientTLS.Clone()
			c.ClientTLS.MinVersion = 0
		}, "TLS13"},
		{"no server certificate", func(c *Config) {
			c.TLS = c.TLS.Clone()
			c.TLS.Certificates = nil
		}, "no certificate"},
		{"no client certificate", func(c *Config) {
			c.ClientTLS = c.ClientTLS.Clone()
			c.ClientTLS.Certificates = nil
		}, "no client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.change(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error about %q", err, tt.want)
			}
			m, lerr := Listen("127.0.0.1:0", c)
			if lerr == nil {
				_ = m.Close()
			}
			if (lerr == nil) != (err == nil) {
				t.Fatalf("Listen = %v, Validate = %v: they must agree", lerr, err)
			}
		})
	}
	if err := (Config{HandshakeTimeout: 1, MaxHandshakes: 1, Secrets: [][]byte{[]byte("x")}}).Validate(); !errors.Is(err, wire.ErrSecretTooShort) {
		t.Fatalf("short secret: %v, want wire.ErrSecretTooShort", err)
	}
}

func TestAuthenticated(t *testing.T) {
	ca := newCA(t, "cluster")
	for _, tt := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"neither", DefaultConfig(), false},
		{"secret", testConfig(t, secretNew), true},
		{"tls", ca.config(t, "n1"), true},
	} {
		if got := tt.cfg.Authenticated(); got != tt.want {
			t.Errorf("%s: Authenticated = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestStreamLayerAddress(t *testing.T) {
	m := listen(t, testConfig(t))
	l, err := NewStreamLayer(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr().String() != m.Addr().String() {
		t.Fatalf("Addr = %v, want the listen address %v", l.Addr(), m.Addr())
	}
	adv := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 7401}
	if l, err = NewStreamLayer(m, adv); err != nil || l.Addr() != adv {
		t.Fatalf("NewStreamLayer(advertise) = %v, %v", l, err)
	}

	all, err := Listen("0.0.0.0:0", testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = all.Close() }()
	if _, err := NewStreamLayer(all, nil); !errors.Is(err, ErrNotAdvertisable) {
		t.Fatalf("NewStreamLayer on 0.0.0.0 = %v, want ErrNotAdvertisable", err)
	}
}

// StreamLayer.Dial reaches the Raft channel of another Mux and closing the layer stops only
// that channel.
func TestStreamLayerDialAndClose(t *testing.T) {
	cfg := testConfig(t, secretNew)
	a, b := listen(t, cfg), listen(t, cfg)
	la, err := NewStreamLayer(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := NewStreamLayer(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := la.Dial(raftAddr(lb), clustertest.Bound)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	sayAndHear(t, c, accept(t, lb), "raft bytes")

	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := la.Dial(raftAddr(lb), clustertest.Bound); !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial to a closed raft channel = %v, want ErrRejected", err)
	}
	c2 := dial(t, b.Addr().String(), ChannelAdmin, cfg)
	sayAndHear(t, c2, accept(t, b.Listener(ChannelAdmin)), "admin still served")
}

func raftAddr(l *StreamLayer) raft.ServerAddress { return raft.ServerAddress(l.Addr().String()) }
