package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

var (
	testSecret = []byte("0123456789abcdef0123456789abcdef")
	testClient = [NonceSize]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}
	testServer = [NonceSize]byte{32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63}
)

func mustHex(t *testing.T, s string) [ProofSize]byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != ProofSize {
		t.Fatalf("bad test vector %q: %v", s, err)
	}
	return [ProofSize]byte(b)
}

// TestProofKnownAnswer pins the proofs to vectors computed outside Go
// (Python: hmac.new(secret, b"latch/1 client" + cn + sn, sha256)), so other
// client implementations can check themselves against the same numbers.
func TestProofKnownAnswer(t *testing.T) {
	wantClient := mustHex(t, "6d1d6bf9e89e2203b0a9fb05d04b1c3494cb44ff9474672368eecb0b65df3f47")
	wantServer := mustHex(t, "6515cc9bfae62cfce3b92ef363de8d30d1d78d4c0af4017745e87c40ee530a23")
	if got := ClientProof(testSecret, testClient, testServer); got != wantClient {
		t.Errorf("ClientProof = %x, want %x", got, wantClient)
	}
	if got := ServerProof(testSecret, testClient, testServer); got != wantServer {
		t.Errorf("ServerProof = %x, want %x", got, wantServer)
	}
}

// TestProofMatchesHMAC recomputes the proofs with crypto/hmac directly, for
// random nonces.
func TestProofMatchesHMAC(t *testing.T) {
	for range 20 {
		cn, err := NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		sn, err := NewNonce()
		if err != nil {
			t.Fatal(err)
		}
		for label, f := range map[string]func([]byte, [NonceSize]byte, [NonceSize]byte) [ProofSize]byte{
			"latch/1 client": ClientProof,
			"latch/1 server": ServerProof,
		} {
			m := hmac.New(sha256.New, testSecret)
			m.Write([]byte(label))
			m.Write(cn[:])
			m.Write(sn[:])
			if got := f(testSecret, cn, sn); !hmac.Equal(got[:], m.Sum(nil)) {
				t.Fatalf("%s proof = %x, want %x", label, got, m.Sum(nil))
			}
		}
	}
}

func TestProofsAreBound(t *testing.T) {
	c := ClientProof(testSecret, testClient, testServer)
	if c == ServerProof(testSecret, testClient, testServer) {
		t.Error("client and server proofs are equal")
	}
	if c == ClientProof(testSecret, testServer, testClient) {
		t.Error("swapping the nonces gives the same proof")
	}
	if c == ClientProof([]byte("another secret of at least 32 bytes"), testClient, testServer) {
		t.Error("another secret gives the same proof")
	}
}

func TestProofEqual(t *testing.T) {
	a := ClientProof(testSecret, testClient, testServer)
	if !ProofEqual(a, a) {
		t.Fatal("a proof differs from itself")
	}
	for i := range ProofSize {
		b := a
		b[i] ^= 0x01
		if ProofEqual(a, b) {
			t.Fatalf("proofs differing in byte %d compare equal", i)
		}
	}
}

func TestMatchClientProof(t *testing.T) {
	old := []byte("old-secret-old-secret-old-secret-1")
	cur := []byte("new-secret-new-secret-new-secret-2")
	secrets := [][]byte{cur, old}

	// Rotation: a client still on the second secret is accepted with it.
	s, ok := MatchClientProof(secrets, testClient, testServer, ClientProof(old, testClient, testServer))
	if !ok || string(s) != string(old) {
		t.Fatalf("proof with the second secret: got %q, %v", s, ok)
	}
	s, ok = MatchClientProof(secrets, testClient, testServer, ClientProof(cur, testClient, testServer))
	if !ok || string(s) != string(cur) {
		t.Fatalf("proof with the first secret: got %q, %v", s, ok)
	}
	// Duplicates: the first in order wins.
	dup := [][]byte{[]byte(string(cur)), cur}
	if s, ok := MatchClientProof(dup, testClient, testServer, ClientProof(cur, testClient, testServer)); !ok || &s[0] != &dup[0][0] {
		t.Fatal("with duplicate secrets the first was not returned")
	}

	for name, p := range map[string][ProofSize]byte{
		"unknown secret": ClientProof([]byte("stranger-stranger-stranger-strangr"), testClient, testServer),
		"server proof":   ServerProof(cur, testClient, testServer),
		"other nonces":   ClientProof(cur, testServer, testClient),
		"zero proof":     {},
	} {
		if s, ok := MatchClientProof(secrets, testClient, testServer, p); ok || s != nil {
			t.Errorf("%s: matched %q", name, s)
		}
	}
	if _, ok := MatchClientProof(nil, testClient, testServer, [ProofSize]byte{}); ok {
		t.Error("no secrets matched a proof")
	}
}

func TestNewNonce(t *testing.T) {
	a, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	if a == b || a == ([NonceSize]byte{}) {
		t.Fatalf("nonces are not random: %x, %x", a, b)
	}
}
