package clustertest

// Secrets returns three distinct shared secrets of at least wire.MinSecretLen bytes, fresh
// copies on every call: one and two are the pair a server or node may hold at once (a
// rotation), other is one that no test configures. The peer handshake vectors
// (docs/vectors/peer_handshake.json) are computed over these bytes.
func Secrets() (one, two, other []byte) {
	return []byte("latch-peer-test-secret-old-0123456789abcdef"),
		[]byte("latch-peer-test-secret-new-fedcba9876543210"),
		[]byte("latch-peer-test-secret-wrong-000000000000000")
}
