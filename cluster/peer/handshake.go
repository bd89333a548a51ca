package peer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
)

// The handshake's bytes; doc.go shows the layout.
const (
	helloMagic   byte = 'P' // first byte of the listener's hello
	helloVersion byte = 1   // the only version
	flagSecret   byte = 1   // hello flags bit 0: a secret is required
	nonceSize         = 32
	proofSize         = sha256.Size
	helloSize         = 3 + nonceSize // magic, version, flags, nonce
	proofMsgSize      = nonceSize + proofSize

	verdictAccept byte = 'y'
	verdictReject byte = 'n'

	// Labels bind a proof to its direction and to this protocol: they differ from each other
	// and from the client protocol's "latch/1 client" and "latch/1 server" (package wire).
	clientLabel = "latch/1 peer client"
	serverLabel = "latch/1 peer server"
)

// Errors a dialer sees; Dial wraps them with the address and channel.
var (
	ErrRejected        = errors.New("the listener rejected the connection: check that both nodes hold the same --peer-secret-file (the client secret opens no peer port) and that the channel is served")
	ErrServerProof     = errors.New("the listener failed to prove it holds the peer secret: it is not a node of this cluster, so the connection was dropped")
	ErrSecretRequired  = errors.New("the listener requires a secret this node does not have: start it with the cluster's --peer-secret-file")
	ErrNoSecretOffered = errors.New("the listener does not ask for a secret but this node has one: refusing to talk to it; give every node the same --peer-secret-file")
	ErrNotPeerPort     = errors.New("the address does not answer as a latch/1 peer port: check the peer address (--raft-addr) dialled, and that both nodes run the same latch version")
	ErrUnknownChannel  = errors.New("unknown peer channel: use ChannelRaft, ChannelForward or ChannelAdmin")
)

// Reasons the listener rejects a connection; they go to its log, never to the dialer.
var (
	errBadChannel    = errors.New("unknown channel byte")
	errClosedChannel = errors.New("channel listener is closed")
	errBadProof      = errors.New("wrong proof: the dialer does not hold any of this node's secrets")
)

// proof is HMAC-SHA256(secret, label | ch | client nonce | server nonce).
func proof(secret []byte, label string, ch byte, client, server *[nonceSize]byte) [proofSize]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write([]byte{ch})
	m.Write(client[:])
	m.Write(server[:])
	var p [proofSize]byte
	m.Sum(p[:0])
	return p
}

// matchProof returns the first of secrets whose client proof for ch and these nonces is got.
// It computes and compares every secret's proof in constant time, whichever matches, so its
// time tells neither whether nor which one did.
func matchProof(secrets [][]byte, ch byte, client, server *[nonceSize]byte, got []byte) (secret []byte, ok bool) {
	for _, s := range secrets {
		want := proof(s, clientLabel, ch, client, server)
		if subtle.ConstantTimeCompare(want[:], got) == 1 && !ok {
			secret, ok = s, true
		}
	}
	return secret, ok
}

func newNonce() (*[nonceSize]byte, error) {
	var n [nonceSize]byte
	if _, err := rand.Read(n[:]); err != nil {
		return nil, fmt.Errorf("peer: reading a nonce from crypto/rand: %w", err)
	}
	return &n, nil
}

// serveHandshake runs the listener's side on c (already inside TLS when TLS is on): hello,
// the dialer's channel and proof, the verdict. open reports whether a channel still takes
// connections. It returns the channel of an accepted connection. On a rejection it has
// written the one-byte reject and returns why; the caller closes c. Deadlines are the
// caller's.
func serveHandshake(c net.Conn, secrets [][]byte, open func(ch byte) bool) (byte, error) {
	server, err := newNonce()
	if err != nil {
		return 0, err
	}
	hello := make([]byte, 0, helloSize)
	hello = append(hello, helloMagic, helloVersion, 0)
	if len(secrets) > 0 {
		hello[2] = flagSecret
	}
	hello = append(hello, server[:]...)
	if _, err := c.Write(hello); err != nil {
		return 0, fmt.Errorf("writing hello: %w", err)
	}

	in := make([]byte, 1, 1+proofMsgSize)
	if len(secrets) > 0 {
		in = in[:1+proofMsgSize]
	}
	if _, err := io.ReadFull(c, in); err != nil {
		return 0, fmt.Errorf("reading the channel byte and proof: %w", err)
	}
	ch := in[0]

	var reason error
	switch {
	case !knownChannel(ch):
		reason = errBadChannel
	case !open(ch):
		reason = errClosedChannel
	}
	out := make([]byte, 1, 1+proofSize)
	if len(secrets) > 0 {
		client := (*[nonceSize]byte)(in[1 : 1+nonceSize])
		secret, ok := matchProof(secrets, ch, client, server, in[1+nonceSize:])
		if !ok {
			reason = errBadProof
		} else {
			p := proof(secret, serverLabel, ch, client, server)
			out = append(out, p[:]...)
		}
	}
	if reason != nil {
		_, _ = c.Write([]byte{verdictReject})
		return ch, reason
	}
	out[0] = verdictAccept
	if _, err := c.Write(out); err != nil {
		return ch, fmt.Errorf("writing the verdict: %w", err)
	}
	return ch, nil
}

// dialHandshake runs the dialer's side on c (already inside TLS when TLS is on): read the
// hello, send ch and, if a secret is asked for, the proof made with secrets[0]; read the
// verdict and check the listener's proof. Deadlines are the caller's.
func dialHandshake(c net.Conn, secrets [][]byte, ch byte) error {
	var hello [helloSize]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return fmt.Errorf("reading the listener's hello: %w", err)
	}
	if hello[0] != helloMagic || hello[1] != helloVersion || hello[2]&^flagSecret != 0 {
		return ErrNotPeerPort
	}
	required := hello[2]&flagSecret != 0
	switch {
	case required && len(secrets) == 0:
		return ErrSecretRequired
	case !required && len(secrets) > 0:
		return ErrNoSecretOffered
	}

	out := make([]byte, 1, 1+proofMsgSize)
	out[0] = ch
	var client, server *[nonceSize]byte
	if required {
		var err error
		if client, err = newNonce(); err != nil {
			return err
		}
		server = (*[nonceSize]byte)(hello[3:])
		p := proof(secrets[0], clientLabel, ch, client, server)
		out = append(out, client[:]...)
		out = append(out, p[:]...)
	}
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("writing the channel byte: %w", err)
	}

	in := make([]byte, 1, 1+proofSize)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("reading the verdict (the listener closed without one): %w", err)
	}
	switch in[0] {
	case verdictAccept:
	case verdictReject:
		return ErrRejected
	default:
		return ErrNotPeerPort
	}
	if required {
		in = in[:1+proofSize]
		if _, err := io.ReadFull(c, in[1:]); err != nil {
			return fmt.Errorf("reading the listener's proof: %w", err)
		}
		want := proof(secrets[0], serverLabel, ch, client, server)
		if subtle.ConstantTimeCompare(want[:], in[1:]) != 1 {
			return ErrServerProof
		}
	}
	return nil
}
