package admin

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Who may call what. An admin call proves one of two principals:
//
//   - the operator: an admin secret (--admin-secret-file) or a client certificate signed by
//     the admin CA (--admin-tls-ca, over an https --http). It may make every call.
//   - a peer: a peer secret (--peer-secret-file) or a client certificate signed by the peer
//     CA (--tls-ca). It may only add or promote itself (POST /v1/peers for the node that
//     answers at the address it gives): that is how a node joins.
//
// The client secret (--secret-file) is neither: it opens the client port and nothing else.
//
// A signed call carries an HMAC of the secret:
//
//	Authorization:          Latch-HMAC ts=<unix ms>,nonce=<32 hex>,node=<id>,boot=<32 hex>,mac=<64 hex>
//	X-Latch-Content-SHA256: <64 hex: SHA-256 of the body>
//	mac = HMAC-SHA256(secret, "latch/2 admin\n" method "\n" uri "\n" ts "\n" nonce "\n"
//	                          node "\n" boot "\n" digest)
//
// where uri is the request URI (the escaped path and the query, so a restore's token_floor
// is signed too), node the --id of the node the call is for (query-escaped in the header)
// and boot the random id of that node's current run: both are in its GET /v1/status, which
// a signer asks first. The secret never crosses the wire.
//
// The whole signature is checked from the headers, before a byte of the body is read; the
// body is then read through its digest and refused if it does not match (VerifiedBody), so
// an unauthenticated caller costs no body read. A signature is accepted within MaxSkew of
// the node's clock, only on the node and run it names, and only once (its nonce is
// remembered for twice MaxSkew): a captured call cannot be replayed on another member, on
// the same one after a restart, or again on the same run, and a changed method, path, query
// or body breaks it.

// MaxSkew is how far a signature's timestamp may be from the server's clock.
const MaxSkew = 30 * time.Second

const (
	authScheme = "Latch-HMAC "
	// HeaderContentDigest carries the hex SHA-256 of a signed call's body.
	HeaderContentDigest = "X-Latch-Content-SHA256"
	bootLen             = 32 // hex characters of a boot id
)

// Principal is who an admin call proved to be.
type Principal int

// The principals, weakest first.
const (
	NoOne    Principal = iota
	Peer               // a node of the cluster: may add or promote itself
	Operator           // may make every admin call
)

// Errors of Verify and VerifiedBody; each is the body of the 401 or 403 that refuses a call.
var (
	ErrBadSignature = errors.New("admin: the signature matches no admin secret of this node: sign with the first line of " +
		"--admin-secret-file (the client secret, --secret-file, authorizes no admin call)")
	ErrStale     = errors.New("admin: signature timestamp too far from the server's clock (more than 30 s): check both clocks")
	ErrReplayed  = errors.New("admin: signature already used: sign every call afresh")
	ErrWrongNode = errors.New("admin: the call was signed for another node or another run of this one " +
		"(a signature is good on one node until it restarts): sign it again for this node (the CLI asks its /v1/status first)")
	ErrPeerOnly = errors.New("admin: a peer credential (--peer-secret-file, or a certificate of --tls-ca) only lets a node add " +
		"or promote itself; this call needs the admin credential: --admin-secret-file, or a certificate of --admin-tls-ca")
	ErrBodyDigest = errors.New("admin: the body does not match the SHA-256 the call signed: nothing was applied; send it again")
)

// Target names the run of a node a signature is for: its --id and its boot id (random for
// every start of the process). A node reports both in GET /v1/status.
type Target struct {
	Node string `json:"id"`
	Boot string `json:"boot"`
}

// NewBootID returns a fresh boot id from crypto/rand.
func NewBootID() (string, error) {
	var b [bootLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("admin: boot id from crypto/rand: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Digest is the SHA-256 of body, as Sign takes it.
func Digest(body []byte) [sha256.Size]byte { return sha256.Sum256(body) }

func mac(secret []byte, method, uri, ts, nonce string, to Target, digest string) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "latch/2 admin\n%s\n%s\n%s\n%s\n%s\n%s\n%s", method, uri, ts, nonce, to.Node, to.Boot, digest)
	return m.Sum(nil)
}

// Sign sets r's Authorization and X-Latch-Content-SHA256 headers: a signature with secret,
// at now, for the node run to, over r's method and URI and the body whose SHA-256 is digest.
func Sign(r *http.Request, secret []byte, to Target, digest [sha256.Size]byte, now time.Time) error {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return err
	}
	ts, nonce, d := strconv.FormatInt(now.UnixMilli(), 10), hex.EncodeToString(n[:]), hex.EncodeToString(digest[:])
	r.Header.Set(HeaderContentDigest, d)
	r.Header.Set("Authorization", authScheme+"ts="+ts+",nonce="+nonce+",node="+url.QueryEscape(to.Node)+
		",boot="+to.Boot+",mac="+hex.EncodeToString(mac(secret, r.Method, r.URL.RequestURI(), ts, nonce, to, d)))
	return nil
}

// Credentials are what a node accepts on admin calls. All empty: every call passes (an
// insecure node, or one whose --http only loopback reaches).
type Credentials struct {
	AdminSecrets [][]byte       // --admin-secret-file: the operator signs with one
	PeerSecrets  [][]byte       // --peer-secret-file: a node signs its own join with one
	AdminCAs     *x509.CertPool // --admin-tls-ca: client certificates of the operator
	PeerCAs      *x509.CertPool // --tls-ca: client certificates of the nodes
}

func (c Credentials) none() bool {
	return len(c.AdminSecrets) == 0 && len(c.PeerSecrets) == 0 && c.AdminCAs == nil && c.PeerCAs == nil
}

// Verifier checks the credential of admin calls made to one node run.
type Verifier struct {
	self  Target
	cred  Credentials
	now   func() time.Time
	mu    sync.Mutex
	seen  map[string]time.Time // nonce -> when it may be forgotten
	sweep time.Time            // when seen was last swept
}

// NewVerifier returns a verifier for calls to the node run self, accepting cred; now is the
// clock (nil: time.Now).
func NewVerifier(self Target, cred Credentials, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{self: self, cred: cred, now: now, seen: map[string]time.Time{}}
}

// Verify returns who r proves to be, from its headers alone (it reads no body): its
// verified client certificate, its signature, or both (the stronger counts). A signature
// that fails is an error even next to a good certificate. A call that proves nothing is
// ErrNoCredential. A signed call's body must then be read with VerifiedBody.
func (v *Verifier) Verify(r *http.Request) (Principal, error) {
	who, _, err := v.verify(r)
	return who, err
}

// verify is Verify that also names the credential that proved who (secretID, certID; "" when
// the node checks none).
func (v *Verifier) verify(r *http.Request) (Principal, string, error) {
	if v.cred.none() {
		return Operator, "", nil
	}
	byCert, cert := v.certPrincipal(r)
	if !strings.HasPrefix(r.Header.Get("Authorization"), authScheme) {
		if byCert == NoOne {
			return NoOne, "", v.noCredential()
		}
		return byCert, cert, nil
	}
	bySig, secret, err := v.checkSignature(r)
	if err != nil {
		return NoOne, "", err
	}
	if byCert > bySig {
		return byCert, cert, nil
	}
	return bySig, secret, nil
}

// ErrNoCredential is Verify's answer to a call that carries no credential.
type ErrNoCredential struct{ certs, secrets bool }

func (e ErrNoCredential) Error() string {
	switch {
	case e.secrets && e.certs:
		return "admin: this call needs the admin credential: pass --admin-secret-file, or a client certificate of --admin-tls-ca " +
			"(--tls-cert and --tls-key with an https:// --http)"
	case e.certs:
		return "admin: this call needs a client certificate of the admin CA (--admin-tls-ca on the node): pass --tls-cert and " +
			"--tls-key with an https:// --http"
	}
	return "admin: this call needs the admin secret: pass --admin-secret-file"
}

func (v *Verifier) noCredential() error {
	return ErrNoCredential{certs: v.cred.AdminCAs != nil || v.cred.PeerCAs != nil,
		secrets: len(v.cred.AdminSecrets) > 0 || len(v.cred.PeerSecrets) > 0}
}

// certPrincipal is who r's client certificate proves to be, and the certificate's
// certID: the TLS listener verified it against the union of both CAs, so here it is
// checked against each one on its own.
func (v *Verifier) certPrincipal(r *http.Request) (Principal, string) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.VerifiedChains) == 0 {
		return NoOne, ""
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	signedBy := func(roots *x509.CertPool) bool {
		if roots == nil {
			return false
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
	switch {
	case signedBy(v.cred.AdminCAs):
		return Operator, certID(leaf)
	case signedBy(v.cred.PeerCAs):
		return Peer, certID(leaf)
	}
	return NoOne, ""
}

// checkSignature checks r's signature header and records its nonce. It returns the
// secretID of the secret that signed.
func (v *Verifier) checkSignature(r *http.Request) (Principal, string, error) {
	var ts, nonce, node, boot, sig string
	for _, kv := range strings.Split(strings.TrimPrefix(r.Header.Get("Authorization"), authScheme), ",") {
		k, val, _ := strings.Cut(kv, "=")
		switch k {
		case "ts":
			ts = val
		case "nonce":
			nonce = val
		case "node":
			node, _ = url.QueryUnescape(val)
		case "boot":
			boot = val
		case "mac":
			sig = val
		}
	}
	digest := r.Header.Get(HeaderContentDigest)
	ms, err := strconv.ParseInt(ts, 10, 64)
	got, herr := hex.DecodeString(sig)
	if _, derr := hex.DecodeString(digest); derr != nil || len(digest) != 2*sha256.Size || err != nil || herr != nil ||
		len(nonce) != 32 || len(got) != sha256.Size {
		return NoOne, "", ErrBadSignature
	}
	to := Target{Node: node, Boot: boot}
	who, cred := NoOne, ""
	for _, c := range []struct {
		secrets [][]byte
		p       Principal
	}{{v.cred.AdminSecrets, Operator}, {v.cred.PeerSecrets, Peer}} {
		for _, s := range c.secrets {
			if hmac.Equal(mac(s, r.Method, r.URL.RequestURI(), ts, nonce, to, digest), got) && who == NoOne {
				who, cred = c.p, secretID(c.p, s)
			}
		}
	}
	switch {
	case who == NoOne:
		return NoOne, "", ErrBadSignature
	case to != v.self:
		return NoOne, "", fmt.Errorf("%w (signed for node %q, boot %.8s; this is node %q, boot %.8s)", ErrWrongNode, to.Node, to.Boot, v.self.Node, v.self.Boot)
	}
	now := v.now()
	if d := now.Sub(time.UnixMilli(ms)); d > MaxSkew || d < -MaxSkew {
		return NoOne, "", ErrStale
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if now.Sub(v.sweep) > MaxSkew {
		for k, until := range v.seen {
			if now.After(until) {
				delete(v.seen, k)
			}
		}
		v.sweep = now
	}
	if _, dup := v.seen[nonce]; dup {
		return NoOne, "", ErrReplayed
	}
	v.seen[nonce] = now.Add(2 * MaxSkew)
	return who, cred, nil
}

// ErrTooLarge is VerifiedBody's error for a body over its limit.
var ErrTooLarge = errors.New("admin: request body too large")

// VerifiedBody reads r's body, at most limit bytes (more is ErrTooLarge), hashing it as it
// goes, and refuses it (ErrBodyDigest) when it does not match the X-Latch-Content-SHA256 the
// call signed. It is for calls Verify has passed: the body of a call nobody authorized is
// never read.
func VerifiedBody(r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if n := r.ContentLength; n > limit {
		return nil, ErrTooLarge
	} else if n > 0 {
		buf.Grow(int(n))
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(r.Body, limit+1)); err != nil {
		return nil, fmt.Errorf("admin: reading the body: %w", err)
	}
	if int64(buf.Len()) > limit {
		return nil, ErrTooLarge
	}
	if want := r.Header.Get(HeaderContentDigest); want != "" && !hmac.Equal([]byte(hex.EncodeToString(h.Sum(nil))), []byte(strings.ToLower(want))) {
		return nil, ErrBodyDigest
	}
	return buf.Bytes(), nil
}
