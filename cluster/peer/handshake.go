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
	helloVersion byte = 1   // the hello's only version (version 2 changes the dialer's part only)
	flagSecret   byte = 1   // hello flags bit 0: a secret is required
	nonceSize         = 32
	proofSize         = sha256.Size
	helloSize         = 3 + nonceSize // magic, version, flags, nonce
	proofMsgSize      = nonceSize + proofSize

	// identityMarker starts a version 2 dialer message (one that states an Identity). It is
	// no channel byte, so a listener of version 1 rejects it and the dialer falls back.
	identityMarker byte = 'I'

	verdictAccept byte = 'y'
	verdictReject byte = 'n'

	// Labels bind a proof to its direction, to this protocol and to its version: they differ
	// from each other and from the client protocol's "latch/1 client" and "latch/1 server"
	// (package wire), so no proof of one kind or version stands in for another.
	clientLabel   = "latch/1 peer client"
	serverLabel   = "latch/1 peer server"
	clientLabelV2 = "latch/2 peer client"
	serverLabelV2 = "latch/2 peer server"
)

// Errors a dialer sees; Dial wraps them with the address and channel.
var (
	ErrRejected        = errors.New("the listener rejected the connection: check that both nodes hold the same --peer-secret-file (the client secret opens no peer port) and that the channel is served")
	ErrServerProof     = errors.New("the listener failed to prove it holds the peer secret: it is not a node of this cluster, so the connection was dropped")
	ErrSecretRequired  = errors.New("the listener requires a secret this node does not have: start it with the cluster's --peer-secret-file")
	ErrNoSecretOffered = errors.New("the listener does not ask for a secret but this node has one: refusing to talk to it; give every node the same --peer-secret-file")
	ErrNotPeerPort     = errors.New("the address does not answer as a latch/1 peer port: check the peer address (--raft-addr) dialled, and that both nodes run the same latch version")
	ErrUnknownChannel  = errors.New("unknown peer channel: use ChannelRaft, ChannelForward, ChannelAdmin or ChannelForwardLeases")
)

// errNoVersion2 marks a version 2 dial that the listener did not complete after its hello
// (rejected, or closed): a listener of version 1 does that, so Dial tries again without
// stating an identity.
var errNoVersion2 = errors.New("the listener did not take a stated identity")

// Reasons the listener rejects a connection; they go to its log, never to the dialer.
var (
	errBadChannel    = errors.New("unknown channel byte")
	errClosedChannel = errors.New("channel listener is closed")
	errBadProof      = errors.New("wrong proof: the dialer does not hold any of this node's secrets")
	errBadIdentity   = errors.New("malformed identity: a node ID and a host:port of 1 to 255 printable bytes each")
	errCertIdentity  = errors.New("the dialer's certificate is not valid for the host of the address it states")
)

// proof is HMAC-SHA256(secret, label | ch | ident | client nonce | server nonce), where ident
// is the encoded Identity of a version 2 exchange and empty in version 1.
func proof(secret []byte, label string, ch byte, ident []byte, client, server *[nonceSize]byte) [proofSize]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write([]byte{ch})
	m.Write(ident)
	m.Write(client[:])
	m.Write(server[:])
	var p [proofSize]byte
	m.Sum(p[:0])
	return p
}

// labels returns the client and server labels of a version 1 (ident empty) or 2 exchange.
func labels(ident []byte) (client, server string) {
	if ident == nil {
		return clientLabel, serverLabel
	}
	return clientLabelV2, serverLabelV2
}

// matchProof returns the first of secrets whose client proof for ch, ident and these nonces
// is got. It computes and compares every secret's proof in constant time, whichever matches,
// so its time tells neither whether nor which one did.
func matchProof(secrets [][]byte, ch byte, ident []byte, client, server *[nonceSize]byte, got []byte) (secret []byte, ok bool) {
	label, _ := labels(ident)
	for _, s := range secrets {
		want := proof(s, label, ch, ident, client, server)
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
// the dialer's channel, identity (version 2) and proof, the verdict. open reports whether a
// channel still takes connections. It returns the channel and stated identity of an accepted
// connection. On a rejection it has written the one-byte reject and returns why; the caller
// closes c. Deadlines are the caller's.
func serveHandshake(c net.Conn, secrets [][]byte, open func(ch byte) bool) (byte, Identity, error) {
	server, err := newNonce()
	if err != nil {
		return 0, Identity{}, err
	}
	hello := make([]byte, 0, helloSize)
	hello = append(hello, helloMagic, helloVersion, 0)
	if len(secrets) > 0 {
		hello[2] = flagSecret
	}
	hello = append(hello, server[:]...)
	if _, err := c.Write(hello); err != nil {
		return 0, Identity{}, fmt.Errorf("writing hello: %w", err)
	}

	ch, id, ident, err := readChannel(c)
	if err != nil {
		return ch, id, err
	}
	var reason error
	switch {
	case !knownChannel(ch):
		reason = errBadChannel
	case !open(ch):
		reason = errClosedChannel
	case ident != nil && id.validate() != nil:
		reason = errBadIdentity
	}
	out := make([]byte, 1, 1+proofSize)
	if len(secrets) > 0 {
		var msg [proofMsgSize]byte
		if _, err := io.ReadFull(c, msg[:]); err != nil {
			return ch, id, fmt.Errorf("reading the proof: %w", err)
		}
		client := (*[nonceSize]byte)(msg[:nonceSize])
		secret, ok := matchProof(secrets, ch, ident, client, server, msg[nonceSize:])
		if !ok {
			reason = errBadProof
		} else {
			_, label := labels(ident)
			p := proof(secret, label, ch, ident, client, server)
			out = append(out, p[:]...)
		}
	}
	if reason == nil {
		reason = checkCertificate(c, id)
	}
	if reason != nil {
		_, _ = c.Write([]byte{verdictReject})
		return ch, id, reason
	}
	out[0] = verdictAccept
	if _, err := c.Write(out); err != nil {
		return ch, id, fmt.Errorf("writing the verdict: %w", err)
	}
	return ch, id, nil
}

// readChannel reads the dialer's message up to its proof: the channel byte (version 1), or
// the identity marker, channel byte and identity (version 2). ident is the identity as sent
// (what the proof covers), nil in version 1.
func readChannel(c net.Conn) (ch byte, id Identity, ident []byte, err error) {
	var b [2]byte
	if _, err := io.ReadFull(c, b[:1]); err != nil {
		return 0, id, nil, fmt.Errorf("reading the channel byte: %w", err)
	}
	if b[0] != identityMarker {
		return b[0], id, nil, nil
	}
	field := func() (string, error) {
		if _, err := io.ReadFull(c, b[1:]); err != nil {
			return "", err
		}
		v := make([]byte, b[1])
		_, err := io.ReadFull(c, v)
		return string(v), err
	}
	if _, err := io.ReadFull(c, b[:1]); err != nil {
		return 0, id, nil, fmt.Errorf("reading the channel byte: %w", err)
	}
	ch = b[0]
	if id.ID, err = field(); err == nil {
		id.Addr, err = field()
	}
	if err != nil {
		return ch, Identity{}, nil, fmt.Errorf("reading the stated identity: %w", err)
	}
	return ch, id, id.encode(nil), nil
}

// dialHandshake runs the dialer's side on c (already inside TLS when TLS is on): read the
// hello, send ch, the identity if id is stated (version 2) and, if a secret is asked for,
// the proof made with secrets[0]; read the verdict and check the listener's proof. A version
// 2 exchange that fails after a good hello wraps errNoVersion2. Deadlines are the caller's.
func dialHandshake(c net.Conn, secrets [][]byte, ch byte, id Identity) error {
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

	var out, ident []byte
	if id.Stated() {
		ident = id.encode(nil)
		out = append(out, identityMarker, ch)
		out = append(out, ident...)
	} else {
		out = append(out, ch)
	}
	var client, server *[nonceSize]byte
	if required {
		var err error
		if client, err = newNonce(); err != nil {
			return err
		}
		server = (*[nonceSize]byte)(hello[3:])
		label, _ := labels(ident)
		p := proof(secrets[0], label, ch, ident, client, server)
		out = append(out, client[:]...)
		out = append(out, p[:]...)
	}
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("writing the channel byte: %w", err)
	}
	if err := readVerdict(c, secrets, ch, ident, client, server, required); err != nil {
		if ident != nil && !errors.Is(err, ErrServerProof) && !errors.Is(err, ErrNotPeerPort) {
			return fmt.Errorf("%w: %w", errNoVersion2, err)
		}
		return err
	}
	return nil
}

// readVerdict reads the listener's verdict and, if a secret is required, checks its proof.
func readVerdict(c net.Conn, secrets [][]byte, ch byte, ident []byte, client, server *[nonceSize]byte, required bool) error {
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
		_, label := labels(ident)
		want := proof(secrets[0], label, ch, ident, client, server)
		if subtle.ConstantTimeCompare(want[:], in[1:]) != 1 {
			return ErrServerProof
		}
	}
	return nil
}
