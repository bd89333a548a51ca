package admin

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func signed(t *testing.T, secret []byte, method, path string, body []byte, at time.Time) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, "http://127.0.0.1:7402"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(r, secret, body, at); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSignatures(t *testing.T) {
	oldS, newS := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier([][]byte{oldS, newS}, func() time.Time { return now })
	body := []byte(`{"id":"n4","addr":"10.0.0.4:7401"}`)

	for _, s := range [][]byte{oldS, newS} {
		if err := v.Verify(signed(t, s, "POST", "/v1/peers", body, now), body); err != nil {
			t.Fatalf("valid signature refused: %v", err)
		}
	}
	r := signed(t, newS, "POST", "/v1/peers", body, now)
	if err := v.Verify(r, body); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(r, body); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: %v, want ErrReplayed", err)
	}
	cases := []struct {
		name string
		r    *http.Request
		body []byte
		want error
	}{
		{"unsigned", func() *http.Request { r, _ := http.NewRequest("POST", "http://x/v1/peers", nil); return r }(), body, ErrUnsigned},
		{"wrong secret", signed(t, []byte(strings.Repeat("x", 32)), "POST", "/v1/peers", body, now), body, ErrBadSignature},
		{"changed body", signed(t, newS, "POST", "/v1/peers", body, now), []byte(`{"id":"evil"}`), ErrBadSignature},
		{"changed method", func() *http.Request {
			r := signed(t, newS, "POST", "/v1/peers", body, now)
			r.Method = "DELETE"
			return r
		}(), body, ErrBadSignature},
		{"changed path", func() *http.Request {
			r := signed(t, newS, "POST", "/v1/peers", body, now)
			r.URL.Path = "/v1/peers/n1"
			return r
		}(), body, ErrBadSignature},
		{"too old", signed(t, newS, "POST", "/v1/peers", body, now.Add(-31*time.Second)), body, ErrStale},
		{"from the future", signed(t, newS, "POST", "/v1/peers", body, now.Add(31*time.Second)), body, ErrStale},
	}
	for _, c := range cases {
		if err := v.Verify(c.r, c.body); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := NewVerifier(nil, nil).Verify(cases[0].r, body); err != nil {
		t.Fatalf("a node without secrets refused an unsigned call: %v", err)
	}
}

// The query is signed too: a restore's token_floor cannot be changed on the way.
func TestSignatureCoversQuery(t *testing.T) {
	s := []byte(strings.Repeat("q", 32))
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier([][]byte{s}, func() time.Time { return now })
	body := []byte("LATCHSNP...")
	r := signed(t, s, "POST", "/v1/restore?token_floor=5000", body, now)
	r.URL.RawQuery = "token_floor=5"
	if err := v.Verify(r, body); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("changed query: %v, want ErrBadSignature", err)
	}
	if err := v.Verify(signed(t, s, "POST", "/v1/restore?token_floor=5000", body, now), body); err != nil {
		t.Fatalf("valid signature with a query refused: %v", err)
	}
}

// With AcceptClientCerts a verified client certificate authorizes a call, a signature still
// does where the node has secrets, and a call with neither is refused, also on a node without
// secrets. Over real connections this is checked by cmd/latch's TLS process test.
func TestClientCertificates(t *testing.T) {
	s := []byte(strings.Repeat("c", 32))
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	body := []byte(`{"id":"n4"}`)
	withCert := func(verified bool) *http.Request {
		r, _ := http.NewRequest("POST", "https://127.0.0.1:7402/v1/peers", bytes.NewReader(body))
		r.TLS = &tls.ConnectionState{}
		if verified {
			r.TLS.VerifiedChains = [][]*x509.Certificate{{{}}}
		}
		return r
	}
	plain := func() *http.Request {
		r, _ := http.NewRequest("POST", "http://127.0.0.1:7402/v1/peers", bytes.NewReader(body))
		return r
	}
	for _, c := range []struct {
		name string
		v    *Verifier
		r    *http.Request
		want error
	}{
		{"certs only: verified certificate", NewVerifier(nil, clock).AcceptClientCerts(), withCert(true), nil},
		{"certs only: TLS without a certificate", NewVerifier(nil, clock).AcceptClientCerts(), withCert(false), ErrNoCredential},
		{"certs only: plain and unsigned", NewVerifier(nil, clock).AcceptClientCerts(), plain(), ErrNoCredential},
		{"certs only: signed, but the node has no secret", NewVerifier(nil, clock).AcceptClientCerts(), signed(t, s, "POST", "/v1/peers", body, now), ErrNoCredential},
		{"both: verified certificate, unsigned", NewVerifier([][]byte{s}, clock).AcceptClientCerts(), withCert(true), nil},
		{"both: signed, no certificate", NewVerifier([][]byte{s}, clock).AcceptClientCerts(), signed(t, s, "POST", "/v1/peers", body, now), nil},
		{"both: neither", NewVerifier([][]byte{s}, clock).AcceptClientCerts(), withCert(false), ErrNoCredential},
		{"secrets only: a certificate is not enough", NewVerifier([][]byte{s}, clock), withCert(true), ErrUnsigned},
	} {
		if err := c.v.Verify(c.r, body); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// Precheck refuses from the headers alone what Verify would refuse whatever the body, and
// records nothing: the same signed call then passes Verify once.
func TestPrecheck(t *testing.T) {
	s := []byte(strings.Repeat("p", 32))
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier([][]byte{s}, func() time.Time { return now })
	body := []byte("LATCHSNP...")
	unsigned, _ := http.NewRequest("POST", "http://127.0.0.1:7402/v1/restore?token_floor=1", nil)
	if err := v.Precheck(unsigned); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned: %v, want ErrUnsigned", err)
	}
	if err := v.Precheck(signed(t, s, "POST", "/v1/restore?token_floor=1", body, now.Add(-time.Minute))); !errors.Is(err, ErrStale) {
		t.Fatalf("stale: %v, want ErrStale", err)
	}
	r := signed(t, s, "POST", "/v1/restore?token_floor=1", body, now)
	if err := v.Precheck(r); err != nil {
		t.Fatalf("a well-formed fresh signature: %v", err)
	}
	if err := v.Verify(r, body); err != nil {
		t.Fatalf("Verify after Precheck: %v", err)
	}
	if err := v.Precheck(r); !errors.Is(err, ErrReplayed) {
		t.Fatalf("precheck of a used nonce: %v, want ErrReplayed", err)
	}
	if err := NewVerifier(nil, nil).Precheck(unsigned); err != nil {
		t.Fatalf("a node without secrets: %v", err)
	}
}
