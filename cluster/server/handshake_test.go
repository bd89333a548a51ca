package server_test

import (
	"strings"
	"testing"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Section 8: the handshake, and section 5's auth_required, auth_failed and bad_version.

func nonce(t *testing.T) [wire.NonceSize]byte {
	t.Helper()
	n, err := wire.NewNonce()
	if err != nil {
		t.Fatalf("nonce: %v", err)
	}
	return n
}

func TestHandshakeWithoutSecret(t *testing.T) {
	ts := startServer(t)
	c := wiretest.Dial(t, ts.addr)
	c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
	h := c.Next(t)
	if h.Op != wire.OpHello || h.Hello.Version != wire.Version || h.Hello.Flags != 0 {
		t.Fatalf("server hello %s, want H version 1 flags 0 (no auth)", wiretest.Describe(h))
	}
	if h.Hello.Nonce == ([wire.NonceSize]byte{}) {
		t.Fatalf("server nonce is all zero; it must come from a cryptographic random source")
	}
	c.Alive(t, 1)
	c.Send(t, wiretest.Acquire(2, 0, 30, "k"))
	c.ExpectGrant(t, 2)
}

func TestHandshakeWithSecret(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne))
	c := wiretest.Dial(t, ts.addr)
	cn := nonce(t)
	c.Send(t, wiretest.Hello(wire.Version, 0, cn))
	h := c.Next(t)
	if h.Op != wire.OpHello || h.Hello.Version != wire.Version || h.Hello.Flags != wire.FlagAuthRequired {
		t.Fatalf("server hello %s, want H version 1 flags 0x01 (auth required)", wiretest.Describe(h))
	}
	sn := h.Hello.Nonce
	if sn == cn {
		t.Fatalf("server echoed the client nonce; it must be its own")
	}
	c.Send(t, wiretest.Proof(wire.ClientProof(secretOne, cn, sn)))
	v := c.Next(t)
	if v.Op != wire.OpProof {
		t.Fatalf("got %s, want the server's V", wiretest.Describe(v))
	}
	// Byte by byte: HMAC-SHA256(secret, "latch/1 server" | client nonce | server nonce).
	want := wire.ServerProof(secretOne, cn, sn)
	if v.Proof != want {
		t.Fatalf("server proof %x, want %x", v.Proof, want)
	}
	if v.Proof == wire.ClientProof(secretOne, cn, sn) {
		t.Fatalf("server proof equals the client proof; the labels must differ")
	}
	c.Alive(t, 7)
}

func TestHandshakeNoncesAreFresh(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne))
	seen := map[[wire.NonceSize]byte]bool{}
	for range 5 {
		c := ts.dial(t)
		if seen[c.ServerNonce] {
			t.Fatalf("server nonce %x repeated across connections", c.ServerNonce)
		}
		seen[c.ServerNonce] = true
		c.Close()
	}
}

func TestHandshakeSecretRotation(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne, secretTwo))
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"first secret", secretOne}, {"second secret", secretTwo}} {
		t.Run(tc.name, func(t *testing.T) {
			c := wiretest.Dial(t, ts.addr)
			c.Hello(t, tc.secret) // checks the server answers with the same secret
			c.Alive(t, 3)
		})
	}
}

func TestHandshakeWrongProof(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne, secretTwo))
	for _, tc := range []struct {
		name  string
		proof func(cn, sn [wire.NonceSize]byte) [wire.ProofSize]byte
	}{
		{"unknown secret", func(cn, sn [wire.NonceSize]byte) [wire.ProofSize]byte { return wire.ClientProof(secretOther, cn, sn) }},
		{"server label", func(cn, sn [wire.NonceSize]byte) [wire.ProofSize]byte { return wire.ServerProof(secretOne, cn, sn) }},
		{"nonces swapped", func(cn, sn [wire.NonceSize]byte) [wire.ProofSize]byte { return wire.ClientProof(secretOne, sn, cn) }},
		{"zero proof", func(cn, sn [wire.NonceSize]byte) [wire.ProofSize]byte { return [wire.ProofSize]byte{} }},
		{"proof with 0x0A bytes", func(cn, sn [wire.NonceSize]byte) [wire.ProofSize]byte {
			var p [wire.ProofSize]byte
			for i := range p {
				p[i] = '\n'
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := wiretest.Dial(t, ts.addr)
			cn := nonce(t)
			c.Send(t, wiretest.Hello(wire.Version, 0, cn))
			h := c.ExpectOp(t, wire.OpHello, 0)
			c.Send(t, wiretest.Proof(tc.proof(cn, h.Hello.Nonce)))
			c.ExpectErrorAndClose(t, 0, wire.ReasonAuthFailed)
		})
	}
}

func TestHandshakeBadVersion(t *testing.T) {
	for _, auth := range []bool{false, true} {
		var opts []option
		if auth {
			opts = append(opts, withSecrets(secretOne))
		}
		ts := startServer(t, opts...)
		for _, v := range []uint8{0, 2, 0x0A, 255} {
			c := wiretest.Dial(t, ts.addr)
			c.Send(t, wiretest.Hello(v, 0, nonce(t)))
			c.ExpectErrorAndClose(t, 0, wire.ReasonBadVersion)
		}
	}
}

// request is a named frame and the owner its answer carries.
type request struct {
	name  string
	owner uint64
	frame []byte
}

// commands are an acquire of k (waiting wait seconds), a release of k and a ping, with the
// owners first, first+1 and first+2.
func commands(first uint64, wait uint8) []request {
	return []request{
		{"acquire", first, wiretest.Acquire(first, wait, 30, "k")},
		{"release", first + 1, wiretest.Release(first+1, 1, "k")},
		{"ping", first + 2, wiretest.Ping(first + 2)},
	}
}

// A request op before the handshake finished: auth_required with the request's owner, closed.
func TestHandshakeRequestBeforeHello(t *testing.T) {
	requests := append(commands(11, 0), []request{
		{"ping owner 0x0A", 0x0A0A0A0A0A0A0A0A, wiretest.Ping(0x0A0A0A0A0A0A0A0A)},
		{"max owner", 1<<64 - 1, wiretest.Ping(1<<64 - 1)},
		{"owner 0", 0, wiretest.Ping(0)},
		{"bad key", 14, wiretest.Acquire(14, 0, 30, "")},
	}...)
	for _, auth := range []bool{false, true} {
		var opts []option
		name := "no auth"
		if auth {
			opts, name = append(opts, withSecrets(secretOne)), "auth"
		}
		ts := startServer(t, opts...)
		t.Run(name, func(t *testing.T) {
			for _, rq := range requests {
				t.Run(rq.name, func(t *testing.T) {
					c := wiretest.Dial(t, ts.addr)
					c.Send(t, rq.frame)
					c.ExpectErrorAndClose(t, rq.owner, wire.ReasonAuthRequired)
				})
			}
		})
	}
}

// Between the server's H and the client's V, requests are still refused.
func TestHandshakeRequestBeforeProof(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne))
	for _, rq := range commands(21, 5) {
		t.Run(rq.name, func(t *testing.T) {
			c := wiretest.Dial(t, ts.addr)
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
			c.ExpectOp(t, wire.OpHello, 0)
			c.Send(t, rq.frame)
			c.ExpectErrorAndClose(t, rq.owner, wire.ReasonAuthRequired)
		})
	}
	if st := ts.node.Stats(); st.Keys != 0 || st.LastToken != 0 {
		t.Fatalf("a request before the handshake changed the table: %+v", st)
	}
}

// Section 5: V before H, V when the server did not ask for auth, and H or V after the
// handshake are structural errors: E bad_request with owner 0, then close.
func TestHandshakeOutOfOrder(t *testing.T) {
	noAuth := startServer(t)
	auth := startServer(t, withSecrets(secretOne))
	var anyProof [wire.ProofSize]byte
	for _, tc := range []struct {
		name string
		ts   *testServer
		run  func(t *testing.T, c *wiretest.Conn)
	}{
		{"V before H, auth server", auth, func(t *testing.T, c *wiretest.Conn) {
			c.Send(t, wiretest.Proof(anyProof))
		}},
		{"V before H, no-auth server", noAuth, func(t *testing.T, c *wiretest.Conn) {
			c.Send(t, wiretest.Proof(anyProof))
		}},
		{"V when auth not asked", noAuth, func(t *testing.T, c *wiretest.Conn) {
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
			c.ExpectOp(t, wire.OpHello, 0)
			c.Send(t, wiretest.Proof(anyProof))
		}},
		{"H twice before V", auth, func(t *testing.T, c *wiretest.Conn) {
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
			c.ExpectOp(t, wire.OpHello, 0)
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
		}},
		{"H after handshake, no auth", noAuth, func(t *testing.T, c *wiretest.Conn) {
			c.Hello(t, nil)
			c.Alive(t, 1)
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
		}},
		{"H after handshake, auth", auth, func(t *testing.T, c *wiretest.Conn) {
			c.Hello(t, secretOne)
			c.Alive(t, 1)
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
		}},
		{"V after handshake", auth, func(t *testing.T, c *wiretest.Conn) {
			c.Hello(t, secretOne)
			c.Alive(t, 1)
			c.Send(t, wiretest.Proof(wire.ClientProof(secretOne, c.ClientNonce, c.ServerNonce)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := wiretest.Dial(t, tc.ts.addr)
			tc.run(t, c)
			c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
		})
	}
}

// A structurally broken frame before the handshake is bad_request (owner 0), not
// auth_required: its owner cannot be trusted.
func TestHandshakeStructuralErrorFirst(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne))
	for _, b := range [][]byte{
		[]byte("X\n"),
		append(wiretest.Ping(5)[:9], "tail\n"...),
		wiretest.Acquire(6, 0, 30, strings.Repeat("k", 200)),
	} {
		c := wiretest.Dial(t, ts.addr)
		c.Send(t, b)
		c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
	}
}

// The whole handshake and the first requests may arrive in one write (pipelined).
func TestHandshakePipelinedWithNoAuth(t *testing.T) {
	ts := startServer(t)
	c := wiretest.Dial(t, ts.addr)
	c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)), wiretest.Ping(5), wiretest.Acquire(6, 0, 10, "pipelined"))
	c.ExpectOp(t, wire.OpHello, 0)
	got := map[uint64]wire.Op{}
	for range 2 {
		r := c.Next(t)
		got[r.Owner] = r.Op
	}
	if got[5] != wire.OpPing || got[6] != wire.OpAcquire {
		t.Fatalf("answers %v, want P for 5 and A for 6", got)
	}
}
