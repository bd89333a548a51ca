package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mutating admin calls (adding and removing members) carry an HMAC of the cluster secret:
//
//	Authorization: Latch-HMAC ts=<unix ms>,nonce=<32 hex>,mac=<64 hex>
//	mac = HMAC-SHA256(secret, "latch/1 admin\n" method "\n" uri "\n" ts "\n" nonce "\n" hex(sha256(body)))
//
// where uri is the request URI: the escaped path and the query, if any (so a restore's
// token_floor is signed too).
//
// The secret never crosses the wire. A signature is accepted within MaxSkew of the server's
// clock and only once (its nonce is remembered for twice that long), so a captured request
// cannot be replayed, and a changed method, path, query or body breaks it.

// MaxSkew is how far a signature's timestamp may be from the server's clock.
const MaxSkew = 30 * time.Second

const authScheme = "Latch-HMAC "

// Errors of Verify.
var (
	ErrUnsigned     = errors.New("admin: this call needs the cluster secret: pass --secret-file")
	ErrBadSignature = errors.New("admin: signature does not match any secret of this node: check --secret-file")
	ErrStale        = errors.New("admin: signature timestamp too far from the server's clock (more than 30 s): check both clocks")
	ErrReplayed     = errors.New("admin: signature already used")
)

func mac(secret []byte, method, uri, ts, nonce string, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "latch/1 admin\n%s\n%s\n%s\n%s\n%s", method, uri, ts, nonce, hex.EncodeToString(sum[:]))
	return m.Sum(nil)
}

// Sign sets r's Authorization header for body with secret at now.
func Sign(r *http.Request, secret, body []byte, now time.Time) error {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return err
	}
	ts, nonce := strconv.FormatInt(now.UnixMilli(), 10), hex.EncodeToString(n[:])
	r.Header.Set("Authorization", authScheme+"ts="+ts+",nonce="+nonce+",mac="+
		hex.EncodeToString(mac(secret, r.Method, r.URL.RequestURI(), ts, nonce, body)))
	return nil
}

// Verifier checks signed admin calls against the node's secrets.
type Verifier struct {
	secrets [][]byte
	certs   bool // a verified TLS client certificate authorizes a call too
	now     func() time.Time
	mu      sync.Mutex
	seen    map[string]time.Time // nonce -> when it may be forgotten
}

// ErrNoCredential is Verify's answer to an unsigned call without a client certificate on a
// node that accepts either.
var ErrNoCredential = errors.New("admin: this call needs the cluster secret (pass --secret-file) " +
	"or a client certificate signed by the cluster CA (pass --tls-cert and --tls-key, with an https:// --http)")

// AcceptClientCerts makes v authorize a call that came over TLS with a client certificate
// the listener verified (against the cluster CA), with or without a signature. It returns v.
// Then a node without secrets no longer lets every call through: each needs a certificate.
func (v *Verifier) AcceptClientCerts() *Verifier {
	v.certs = true
	return v
}

// NewVerifier returns a verifier for secrets; now is the clock (nil: time.Now).
func NewVerifier(secrets [][]byte, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{secrets: secrets, now: now, seen: map[string]time.Time{}}
}

// Verify checks r's signature over body, or (AcceptClientCerts) its verified client
// certificate. Without secrets or certificates every call passes (an insecure node, or one
// whose --http only loopback reaches).
func (v *Verifier) Verify(r *http.Request, body []byte) error {
	return v.check(r, body, true)
}

// Precheck refuses, before the body is read, a call that Verify would refuse whatever its
// body: no credential, a malformed or stale signature header, a nonce already used. A large
// body (a restore) is then only read for a call that could pass; Verify must still follow.
func (v *Verifier) Precheck(r *http.Request) error {
	return v.check(r, nil, false)
}

func (v *Verifier) check(r *http.Request, body []byte, full bool) error {
	if v.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return nil
	}
	h := r.Header.Get("Authorization")
	switch {
	case len(v.secrets) == 0 && !v.certs:
		return nil
	case len(v.secrets) == 0 || v.certs && !strings.HasPrefix(h, authScheme):
		return ErrNoCredential
	case !strings.HasPrefix(h, authScheme):
		return ErrUnsigned
	}
	var ts, nonce, sig string
	for _, kv := range strings.Split(strings.TrimPrefix(h, authScheme), ",") {
		k, val, _ := strings.Cut(kv, "=")
		switch k {
		case "ts":
			ts = val
		case "nonce":
			nonce = val
		case "mac":
			sig = val
		}
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	got, herr := hex.DecodeString(sig)
	if err != nil || herr != nil || len(nonce) != 32 || len(got) != sha256.Size {
		return ErrBadSignature
	}
	now := v.now()
	if full {
		ok := false
		for _, s := range v.secrets {
			if hmac.Equal(mac(s, r.Method, r.URL.RequestURI(), ts, nonce, body), got) {
				ok = true
			}
		}
		if !ok {
			return ErrBadSignature
		}
	}
	if d := now.Sub(time.UnixMilli(ms)); d > MaxSkew || d < -MaxSkew {
		return ErrStale
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, until := range v.seen {
		if now.After(until) {
			delete(v.seen, k)
		}
	}
	if _, dup := v.seen[nonce]; dup {
		return ErrReplayed
	}
	if full {
		v.seen[nonce] = now.Add(2 * MaxSkew)
	}
	return nil
}
