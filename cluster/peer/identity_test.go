package peer

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/clustertest"
)

// idConfig is testConfig for a node that states id at addr.
func idConfig(t *testing.T, id, addr string, secrets ...[]byte) Config {
	t.Helper()
	cfg := testConfig(t, secrets...)
	cfg.ID, cfg.Advertise = id, addr
	return cfg
}

// The version 2 proof is HMAC-SHA256(secret, "latch/2 peer client" | ch | len(id) | id |
// len(addr) | addr | client nonce | server nonce): pinned, since other nodes compute it.
func TestVersion2ProofFormat(t *testing.T) {
	client, server := pinnedNonces()
	want := hmacOf(secretOld, []byte("latch/2 peer client"), []byte{'r', 2, 'n', '2', 14},
		[]byte("127.0.0.1:7002"), client[:], server[:])
	ident := Identity{ID: "n2", Addr: "127.0.0.1:7002"}.encode(nil)
	got := proof(secretOld, clientLabelV2, ChannelRaft, ident, &client, &server)
	if !bytes.Equal(got[:], want) {
		t.Fatalf("version 2 proof = %x, want %x", got, want)
	}
	if v1 := proof(secretOld, clientLabel, ChannelRaft, nil, &client, &server); v1 == got {
		t.Fatal("a version 1 proof equals the version 2 one")
	}
}

// A dialer that states an identity is handed to the channel with it, with or without
// secrets; one that states none is handed on with none.
func TestIdentityReachesTheChannel(t *testing.T) {
	for _, secrets := range [][][]byte{nil, {secretNew}} {
		m := listen(t, testConfig(t, secrets...))
		addr := m.Addr().String()
		dial(t, addr, ChannelRaft, idConfig(t, "n2", "127.0.0.1:7002", secrets...))
		if got := IdentityOf(accept(t, m.Listener(ChannelRaft))); got != (Identity{ID: "n2", Addr: "127.0.0.1:7002"}) {
			t.Fatalf("secrets %d: identity %v, want n2@127.0.0.1:7002", len(secrets), got)
		}
		dial(t, addr, ChannelForward, testConfig(t, secrets...))
		if got := IdentityOf(accept(t, m.Listener(ChannelForward))); got.Stated() {
			t.Fatalf("secrets %d: a dialer that stated nothing has identity %v", len(secrets), got)
		}
	}
}

// sendV2 writes a version 2 dialer message on c for the listener's hello: it states sent but
// proves claimed (they differ when a relay rewrites the identity). It returns the verdict.
func sendV2(t *testing.T, c net.Conn, hello [helloSize]byte, sent, claimed Identity) byte {
	t.Helper()
	var client [nonceSize]byte
	_, _ = rand.Read(client[:])
	p := proof(secretNew, clientLabelV2, ChannelRaft, claimed.encode(nil), &client, (*[nonceSize]byte)(hello[3:]))
	msg := append([]byte{identityMarker, ChannelRaft}, sent.encode(nil)...)
	msg = append(append(msg, client[:]...), p[:]...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var v [1]byte
	if _, err := io.ReadFull(c, v[:]); err != nil {
		t.Fatalf("reading the verdict: %v", err)
	}
	return v[0]
}

// The identity is inside the proof: a relay cannot change it. A malformed one is refused.
func TestStatedIdentityIsProvenAndChecked(t *testing.T) {
	m := listen(t, testConfig(t, secretNew))
	n2 := Identity{ID: "n2", Addr: "127.0.0.1:7002"}
	for _, tc := range []struct {
		name          string
		sent, claimed Identity
		want          byte
	}{
		{"as proven", n2, n2, verdictAccept},
		{"rewritten ID", Identity{ID: "n1", Addr: n2.Addr}, n2, verdictReject},
		{"rewritten address", Identity{ID: "n2", Addr: "127.0.0.1:7001"}, n2, verdictReject},
		{"empty ID", Identity{Addr: n2.Addr}, Identity{Addr: n2.Addr}, verdictReject},
		{"space in ID", Identity{ID: "n 2", Addr: n2.Addr}, Identity{ID: "n 2", Addr: n2.Addr}, verdictReject},
		{"address without port", Identity{ID: "n2", Addr: "n2"}, Identity{ID: "n2", Addr: "n2"}, verdictReject},
	} {
		c := rawDial(t, m.Addr().String())
		if got := sendV2(t, c, readHello(t, c), tc.sent, tc.claimed); got != tc.want {
			t.Errorf("%s: verdict %q, want %q", tc.name, got, tc.want)
		}
	}
	if st := settled(t, m); st.Accepted != 1 || st.Rejected != 5 {
		t.Fatalf("stats %+v, want 1 accepted and 5 rejected", st)
	}
}

// oldListener serves the version 1 handshake only, as a node of an older latch does: a
// dialer message that does not start with a channel byte is rejected. It counts the
// connections it accepted.
func oldListener(t *testing.T, secret []byte) (addr string, accepted *atomic.Int32) {
	accepted = &atomic.Int32{}
	addr = fakeListener(t, func(c net.Conn) {
		hello := make([]byte, helloSize)
		hello[0], hello[1] = helloMagic, helloVersion
		if secret != nil {
			hello[2] = flagSecret
		}
		_, _ = rand.Read(hello[3:])
		_, _ = c.Write(hello)
		msg := make([]byte, 1, 1+proofMsgSize)
		if secret != nil {
			msg = msg[:1+proofMsgSize]
		}
		if _, err := io.ReadFull(c, msg); err != nil || !knownChannel(msg[0]) {
			_, _ = c.Write([]byte{verdictReject})
			return
		}
		out := []byte{verdictAccept}
		if secret != nil {
			client, server := (*[nonceSize]byte)(msg[1:1+nonceSize]), (*[nonceSize]byte)(hello[3:])
			if want := proof(secret, clientLabel, msg[0], nil, client, server); !bytes.Equal(want[:], msg[1+nonceSize:]) {
				_, _ = c.Write([]byte{verdictReject})
				return
			}
			p := proof(secret, serverLabel, msg[0], nil, client, server)
			out = append(out, p[:]...)
		}
		accepted.Add(1)
		_, _ = c.Write(out)
	})
	return addr, accepted
}

// A node that states its identity still reaches a node of an older latch, which rejects the
// version 2 message: Dial tries again as version 1 (a rolling upgrade keeps working).
func TestDialFallsBackToVersion1(t *testing.T) {
	for _, secret := range [][]byte{nil, secretNew} {
		addr, accepted := oldListener(t, secret)
		var secrets [][]byte
		if secret != nil {
			secrets = [][]byte{secret}
		}
		dial(t, addr, ChannelRaft, idConfig(t, "n2", "127.0.0.1:7002", secrets...))
		eventually(t, "the old listener counts its connection", func() bool { return accepted.Load() == 1 })
	}
}

// With mutual TLS, the dialer's certificate must be valid for the host it states: a node
// cannot state another host's address. (Certificates for 127.0.0.1 all cover loopback
// addresses, so on one host the address binds nothing beyond the CA.)
func TestCertificateBindsTheStatedHost(t *testing.T) {
	ca := newCA(t, "cluster")
	m := listen(t, ca.config(t, "n1", secretNew))
	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"n2:7000", true}, {"127.0.0.1:7002", true}, {"n3:7000", false}} {
		cfg := ca.config(t, "n2", secretNew) // a certificate for DNS n2 and IP 127.0.0.1
		cfg.ID, cfg.Advertise = "n2", tc.addr
		dial(t, m.Addr().String(), ChannelRaft, cfg)
		got := IdentityOf(accept(t, m.Listener(ChannelRaft)))
		if want := (Identity{ID: "n2", Addr: tc.addr}); tc.ok != (got == want) {
			t.Errorf("stating %s with a certificate for n2: accepted as %v", tc.addr, got)
		}
		if !tc.ok && got.Stated() {
			t.Errorf("stating %s: handed on with identity %v, want none (the dialer fell back to version 1)", tc.addr, got)
		}
	}
	if st := settled(t, m); st.Rejected != 1 {
		t.Fatalf("stats %+v, want the wrong host rejected once", st)
	}
}

// The StreamLayer hands raft only the connections its Admission admits, closes the others,
// and logs each refused source once, not per connection.
func TestStreamLayerAdmission(t *testing.T) {
	out := &clustertest.Buffer{}
	cfg := testConfig(t, secretNew)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info})
	m := listen(t, cfg)
	layer, err := NewStreamLayer(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	layer.SetAdmission(Admission{Check: func(id Identity) error {
		if id.ID == "n2" {
			return nil
		}
		return errors.New("not a member")
	}})
	addr := m.Addr().String()
	admitted := make(chan net.Conn, 4) // raft's accept loop, in short
	go func() {
		defer close(admitted)
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			admitted <- c
		}
	}()
	t.Cleanup(func() {
		_ = layer.Close()
		for c := range admitted {
			_ = c.Close()
		}
	})
	next := func() Identity {
		t.Helper()
		select {
		case c := <-admitted:
			return IdentityOf(c)
		case <-time.After(clustertest.Bound):
			t.Fatal("nothing admitted")
			return Identity{}
		}
	}

	evil := idConfig(t, "evil", "127.0.0.1:6666", secretNew)
	legacy := testConfig(t, secretNew)
	for range 3 {
		for _, c := range []Config{evil, legacy} {
			expectClosed(t, dial(t, addr, ChannelRaft, c), clustertest.Bound)
		}
	}
	dial(t, addr, ChannelRaft, idConfig(t, "n2", "127.0.0.1:7002", secretNew))
	if got := next(); got.ID != "n2" {
		t.Fatalf("admitted %v, want n2", got)
	}
	if layer.Refused() != 6 {
		t.Fatalf("refused %d connections, want 6", layer.Refused())
	}
	if n := out.Count("refusing a Raft connection"); n != 2 {
		t.Fatalf("logged %d refusals for two sources, want 2:\n%s", n, out.String())
	}

	layer.SetAdmission(Admission{Legacy: true})
	dial(t, addr, ChannelRaft, legacy)
	if got := next(); got.Stated() {
		t.Fatalf("legacy connection admitted as %v", got)
	}
}
