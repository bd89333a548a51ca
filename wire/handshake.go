package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
)

// Labels that bind a proof to its direction, so a client proof can never be
// replayed as a server proof.
const (
	clientLabel = "latch/1 client"
	serverLabel = "latch/1 server"
)

// NewNonce returns NonceSize bytes from crypto/rand for a hello frame.
func NewNonce() ([NonceSize]byte, error) {
	var n [NonceSize]byte
	_, err := rand.Read(n[:])
	return n, err
}

// ClientProof is the client's V proof: HMAC-SHA256(secret, "latch/1 client"
// | client nonce | server nonce).
func ClientProof(secret []byte, client, server [NonceSize]byte) [ProofSize]byte {
	return proof(secret, clientLabel, &client, &server)
}

// ServerProof is the server's V proof: HMAC-SHA256(secret, "latch/1 server"
// | client nonce | server nonce). The client must check it with ProofEqual.
func ServerProof(secret []byte, client, server [NonceSize]byte) [ProofSize]byte {
	return proof(secret, serverLabel, &client, &server)
}

func proof(secret []byte, label string, client, server *[NonceSize]byte) [ProofSize]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(client[:])
	m.Write(server[:])
	var p [ProofSize]byte
	m.Sum(p[:0])
	return p
}

// ProofEqual compares two proofs in constant time.
func ProofEqual(a, b [ProofSize]byte) bool {
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// MatchClientProof returns the first secret of secrets whose client proof
// for these nonces equals proof. It computes and compares the proof of every
// secret, whichever matches, so its time does not tell which one did. The
// server answers with ServerProof of the returned secret.
func MatchClientProof(secrets [][]byte, client, server [NonceSize]byte, proof [ProofSize]byte) (secret []byte, ok bool) {
	for _, s := range secrets {
		if ProofEqual(ClientProof(s, client, server), proof) && !ok {
			secret, ok = s, true
		}
	}
	return secret, ok
}
