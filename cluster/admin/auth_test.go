package admin

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

var (
	self       = Target{Node: "n1", Boot: strings.Repeat("b", 32)}
	adminOld   = []byte(strings.Repeat("o", 32))
	adminNew   = []byte(strings.Repeat("n", 32))
	peerSecret = []byte(strings.Repeat("p", 32))
	clientSec  = []byte(strings.Repeat("c", 32))
	at         = time.Unix(1_800_000_000, 0)
)

func signedFor(t *testing.T, to Target, secret []byte, method, path string, body []byte, when time.Time) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, "http://127.0.0.1:7402"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(r, secret, to, Digest(body), when); err != nil {
		t.Fatal(err)
	}
	return r
}

func signed(t *testing.T, secret []byte, method, path string, body []byte, when time.Time) *http.Request {
	t.Helper()
	return signedFor(t, self, secret, method, path, body, when)
}

func testVerifier(cred Credentials) *Verifier {
	return NewVerifier(self, cred, func() time.Time { return at })
}

func TestSignatures(t *testing.T) {
	v := testVerifier(Credentials{AdminSecrets: [][]byte{adminOld, adminNew}, PeerSecrets: [][]byte{peerSecret}})
	body := []byte(`{"id":"n4","addr":"10.0.0.4:7401"}`)

	// Rotation: every line of the admin file is accepted.
	for _, s := range [][]byte{adminOld, adminNew} {
		if who, err := v.Verify(signed(t, s, "POST", "/v1/peers", body, at)); err != nil || who != Operator {
			t.Fatalf("valid admin signature: %v, %v", who, err)
		}
	}
	if who, err := v.Verify(signed(t, peerSecret, "POST", "/v1/peers", body, at)); err != nil || who != Peer {
		t.Fatalf("peer signature: %v, %v; want Peer", who, err)
	}
	r := signed(t, adminNew, "POST", "/v1/peers", body, at)
	if _, err := v.Verify(r); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(r); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: %v, want ErrReplayed", err)
	}
	var noCred ErrNoCredential
	cases := []struct {
		name string
		r    *http.Request
		want error
	}{
		{"unsigned", func() *http.Request { r, _ := http.NewRequest("POST", "http://x/v1/peers", nil); return r }(), noCred},
		{"the client secret", signed(t, clientSec, "POST", "/v1/peers", body, at), ErrBadSignature},
		{"changed method", func() *http.Request {
			r := signed(t, adminNew, "POST", "/v1/peers", body, at)
			r.Method = "DELETE"
			return r
		}(), ErrBadSignature},
		{"changed path", func() *http.Request {
			r := signed(t, adminNew, "POST", "/v1/peers", body, at)
			r.URL.Path = "/v1/peers/n1"
			return r
		}(), ErrBadSignature},
		{"changed query", func() *http.Request {
			r := signed(t, adminNew, "POST", "/v1/restore?token_floor=5000", body, at)
			r.URL.RawQuery = "token_floor=5"
			return r
		}(), ErrBadSignature},
		{"changed digest", func() *http.Request {
			r := signed(t, adminNew, "POST", "/v1/peers", body, at)
			d := Digest([]byte("other"))
			r.Header.Set(HeaderContentDigest, hex.EncodeToString(d[:]))
			return r
		}(), ErrBadSignature},
		{"for another node", signedFor(t, Target{Node: "n2", Boot: self.Boot}, adminNew, "POST", "/v1/peers", body, at), ErrWrongNode},
		{"for another run", signedFor(t, Target{Node: "n1", Boot: strings.Repeat("a", 32)}, adminNew, "POST", "/v1/peers", body, at), ErrWrongNode},
		{"too old", signed(t, adminNew, "POST", "/v1/peers", body, at.Add(-31*time.Second)), ErrStale},
		{"from the future", signed(t, adminNew, "POST", "/v1/peers", body, at.Add(31*time.Second)), ErrStale},
	}
	for _, c := range cases {
		_, err := v.Verify(c.r)
		if _, isNoCred := c.want.(ErrNoCredential); isNoCred {
			if !errors.As(err, &noCred) || !strings.Contains(err.Error(), "--admin-secret-file") {
				t.Errorf("%s: %v, want ErrNoCredential naming --admin-secret-file", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if who, err := NewVerifier(self, Credentials{}, nil).Verify(cases[0].r); err != nil || who != Operator {
		t.Fatalf("a node without credentials: %v, %v; want every call to pass", who, err)
	}
}

// The body is read after the signature passed, through the digest the signature covers.
func TestVerifiedBody(t *testing.T) {
	body := []byte("LATCHSNP backup bytes")
	r := signed(t, adminNew, "POST", "/v1/restore?token_floor=1", body, at)
	if got, err := VerifiedBody(r, 1<<20); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("matching body: %q, %v", got, err)
	}
	r = signed(t, adminNew, "POST", "/v1/restore?token_floor=1", body, at)
	r.Body = io.NopCloser(bytes.NewReader([]byte("LATCHSNP other bytes!")))
	if _, err := VerifiedBody(r, 1<<20); !errors.Is(err, ErrBodyDigest) {
		t.Fatalf("swapped body: %v, want ErrBodyDigest", err)
	}
	r = signed(t, adminNew, "POST", "/v1/restore?token_floor=1", body, at)
	if _, err := VerifiedBody(r, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("body over the limit: %v, want ErrTooLarge", err)
	}
	r.ContentLength = -1 // chunked: the limit holds while reading
	r.Body = io.NopCloser(bytes.NewReader(body))
	if _, err := VerifiedBody(r, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("chunked body over the limit: %v, want ErrTooLarge", err)
	}
}

// tlsRequest is a request that came over TLS with cert as its verified client certificate.
func tlsRequest(t *testing.T, cert tls.Certificate) *http.Request {
	t.Helper()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("POST", "https://127.0.0.1:7402/v1/peers", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	return r
}

// A certificate of the admin CA is the operator, one of the peer CA a peer, one of another
// CA nobody; a signature still counts next to a certificate. Over real connections this is
// checked by cmd/latch's TLS process test.
func TestClientCertificates(t *testing.T) {
	adminCA, peerCA, otherCA := clustertest.NewCA(t, "admin"), clustertest.NewCA(t, "peer"), clustertest.NewCA(t, "other")
	both := Credentials{AdminCAs: adminCA.Pool, PeerCAs: peerCA.Pool}
	plain, _ := http.NewRequest("POST", "http://127.0.0.1:7402/v1/peers", nil)
	for _, c := range []struct {
		name string
		cred Credentials
		r    *http.Request
		want Principal
	}{
		{"admin CA", both, tlsRequest(t, adminCA.Issue(t, "ops")), Operator},
		{"peer CA", both, tlsRequest(t, peerCA.Issue(t, "node")), Peer},
		{"another CA", both, tlsRequest(t, otherCA.Issue(t, "x")), NoOne},
		{"plain and unsigned", both, plain, NoOne},
		{"peer CA only: no certificate is the operator", Credentials{PeerCAs: peerCA.Pool}, tlsRequest(t, adminCA.Issue(t, "ops")), NoOne},
		{"peer certificate and an admin signature", Credentials{PeerCAs: peerCA.Pool, AdminSecrets: [][]byte{adminNew}}, func() *http.Request {
			r := tlsRequest(t, peerCA.Issue(t, "node"))
			Sign(r, adminNew, self, Digest(nil), at)
			return r
		}(), Operator},
		{"peer certificate and a bad signature", Credentials{PeerCAs: peerCA.Pool, AdminSecrets: [][]byte{adminNew}}, func() *http.Request {
			r := tlsRequest(t, peerCA.Issue(t, "node"))
			Sign(r, clientSec, self, Digest(nil), at)
			return r
		}(), NoOne},
	} {
		who, err := testVerifier(c.cred).Verify(c.r)
		if who != c.want || (c.want == NoOne) != (err != nil) {
			t.Errorf("%s: %v, %v; want %v", c.name, who, err, c.want)
		}
	}
}

// Concurrent calls with one captured signature: exactly one passes, whichever goroutine
// wins; the others are replays.
func TestReplayUnderConcurrency(t *testing.T) {
	v := testVerifier(Credentials{AdminSecrets: [][]byte{adminNew}})
	r := signed(t, adminNew, "DELETE", "/v1/peers/n2", nil, at)
	const n = 32
	errs := make(chan error, n)
	for range n {
		go func() {
			c := r.Clone(r.Context())
			_, err := v.Verify(c)
			errs <- err
		}()
	}
	passed := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			passed++
		case !errors.Is(err, ErrReplayed):
			t.Errorf("a copy of a valid call: %v, want nil or ErrReplayed", err)
		}
	}
	if passed != 1 {
		t.Fatalf("%d of %d copies of one signed call passed, want exactly 1", passed, n)
	}
}
