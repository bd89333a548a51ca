package admin

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net/http"

	"github.com/latchd/latch/cluster"
)

// Caller is who made an admin call, as the node's logs and audit trail name them: a forced
// release is audited with it (cluster.Operator), and the admin channel's line for a call a
// follower relayed says it. A follower sends it with the call on the admin channel (the
// "caller" field of ChannelRequest); a leader of an older latch ignores the field (its
// decoder, encoding/json's, skips fields it does not know) and logs the call as before.
type Caller struct {
	// Addr is the HTTP remote address of the call, as the node that took it saw it.
	Addr string `json:"addr,omitempty"`
	// Cred names the credential the call proved (secretID, certID); "" on a node that checks none.
	Cred string `json:"cred,omitempty"`
	// Via is the node (its --id) that took the call over HTTP and relayed it to the leader
	// over the admin channel; "" for a call made to the leader itself.
	Via string `json:"via,omitempty"`
}

// operator is c as the lock node's audit trail takes it.
func (c Caller) operator() cluster.Operator {
	return cluster.Operator{Addr: c.Addr, Via: c.Via, Cred: c.Cred}
}

// args are c's fields for a log line, those that are set.
func (c Caller) args() []any {
	var kv []any
	for _, f := range [...]struct{ k, v string }{{"from", c.Addr}, {"via", c.Via}, {"cred", c.Cred}} {
		if f.v != "" {
			kv = append(kv, f.k, f.v)
		}
	}
	return kv
}

type callerKey struct{}

// WithCaller returns ctx carrying c, for the calls made with it (CallerOf).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, &c)
}

// CallerOf is the caller ctx carries (WithCaller, or an HTTP call's: its remote address and,
// once authorized, its credential); zero when it carries none.
func CallerOf(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(*Caller); ok {
		return *c
	}
	return Caller{}
}

// Relayed returns ctx with its caller marked as relayed by the node via (its --id): what a
// follower does before it forwards an admin call to the leader.
func Relayed(ctx context.Context, via string) context.Context {
	c := CallerOf(ctx)
	if c.Via == "" {
		c.Via = via
	}
	return WithCaller(ctx, c)
}

// withCaller gives every request's context its Caller, with the remote address; authorize
// adds the credential.
func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, &Caller{Addr: r.RemoteAddr})))
	})
}

// setCred records the credential of r's caller (authorize, once it has verified it).
func setCred(r *http.Request, cred string) {
	if c, ok := r.Context().Value(callerKey{}).(*Caller); ok {
		c.Cred = cred
	}
}

// secretID names an admin credential for logs without revealing it (the credential ids of
// Caller.Cred): for a secret, "admin
// secret" or "peer secret" and the first 8 bytes, in hex, of SHA-256 over a fixed label and
// the secret (a fingerprint: the same secret has the same one on every node, and the secret
// cannot be got back from it); for a client certificate, "cert", its subject's common name and
// the first 8 bytes of the SHA-256 of the certificate.
func secretID(p Principal, secret []byte) string {
	h := sha256.New()
	h.Write([]byte("latch admin credential id\n"))
	h.Write(secret)
	kind := "admin secret "
	if p == Peer {
		kind = "peer secret "
	}
	return kind + hex.EncodeToString(h.Sum(nil)[:8])
}

// certID is secretID's counterpart for a client certificate.
func certID(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return "cert " + c.Subject.CommonName + " sha256:" + hex.EncodeToString(sum[:8])
}
