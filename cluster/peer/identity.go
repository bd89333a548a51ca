package peer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"unicode"
	"unicode/utf8"
)

// maxIdentityField is the longest node ID or address a dialer may state (one length byte).
const maxIdentityField = 255

// Identity is what a dialer stated about itself in the handshake (doc.go, version 2): its
// node ID and the address it advertises (its --advertise, the address the other nodes dial
// and the one the Raft configuration holds for it). The secret proof covers both, so only a
// holder of the peer credential can state one; with mutual TLS the dialer's certificate must
// also be valid for the address's host. A zero Identity means the dialer stated none: a node
// of a latch version before handshake version 2, or a tool that is no node.
type Identity struct {
	ID   string
	Addr string
}

// Stated reports whether the dialer stated an identity.
func (i Identity) Stated() bool { return i.ID != "" }

// String is the identity for logs: "id@addr", or "(none)".
func (i Identity) String() string {
	if !i.Stated() {
		return "(none)"
	}
	return i.ID + "@" + i.Addr
}

// validate reports why i cannot be stated: both fields 1..255 bytes of printable UTF-8, and
// Addr a host:port.
func (i Identity) validate() error {
	for _, f := range []struct{ name, v string }{{"node ID", i.ID}, {"advertised address", i.Addr}} {
		if err := checkField(f.v); err != nil {
			return fmt.Errorf("%s %q: %w", f.name, f.v, err)
		}
	}
	if _, _, err := net.SplitHostPort(i.Addr); err != nil {
		return fmt.Errorf("advertised address %q: %w", i.Addr, err)
	}
	return nil
}

func checkField(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > maxIdentityField:
		return fmt.Errorf("is %d bytes long; at most %d", len(s), maxIdentityField)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == ' ' {
			return errors.New("contains a space or a control character")
		}
	}
	return nil
}

// encode appends i as the handshake carries it: len(ID) | ID | len(Addr) | Addr.
func (i Identity) encode(b []byte) []byte {
	b = append(b, byte(len(i.ID)))
	b = append(b, i.ID...)
	b = append(b, byte(len(i.Addr)))
	return append(b, i.Addr...)
}

// checkCertificate reports whether the TLS peer of c (when c is a TLS connection) holds a
// certificate valid for the host of the address it states. Every node's certificate must
// already name that host: the other nodes dial the advertised address and verify the
// certificate the node serves against it, and a node presents the same certificate when it
// dials (MutualTLS). So a node cannot state another node's address, unless its certificate
// names that host too (one certificate for all nodes, a wildcard, or several nodes on one
// host: then the address binds nothing beyond the cluster CA).
func checkCertificate(c net.Conn, id Identity) error {
	tc, ok := c.(*tls.Conn)
	if !ok || !id.Stated() {
		return nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return errCertIdentity
	}
	host, _, err := net.SplitHostPort(id.Addr)
	if err != nil {
		return errBadIdentity
	}
	if err := certs[0].VerifyHostname(host); err != nil {
		return fmt.Errorf("%w: stated %s: %v", errCertIdentity, id, err)
	}
	return nil
}

// Conn is a connection a channel Listener's Accept returns: the authenticated connection
// and the Identity its dialer stated.
type Conn struct {
	net.Conn
	id Identity
}

// Identity is what the dialer stated in the handshake; zero if it stated nothing.
func (c *Conn) Identity() Identity { return c.id }

// NetConn returns the connection underneath: the *tls.Conn with TLS, else the TCP connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection when the one underneath can (TCP, TLS over TCP).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("peer: the connection cannot half-close")
}

// IdentityOf returns the Identity the dialer of c stated, for a connection returned by a
// channel Listener's Accept (or StreamLayer.Accept); zero for any other connection.
func IdentityOf(c net.Conn) Identity {
	if pc, ok := c.(*Conn); ok {
		return pc.id
	}
	return Identity{}
}
