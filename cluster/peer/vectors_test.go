package peer

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// docs/vectors/peer_handshake.json: the peer port's handshake (doc.go; docs/protocol.md,
// section 12) with fixed secrets and nonces. TestPeerVectorsUpToDate writes it from the cases
// below (go test ./cluster/peer -run TestPeerVectors -update); the other tests read it back
// and check the proofs, the bytes of every message, and a live exchange with each side of
// the real handshake, the other side being played from the file alone.

var update = flag.Bool("update", false, "rewrite docs/vectors/peer_handshake.json")

var peerVectorPath = filepath.Join("..", "..", "docs", "vectors", "peer_handshake.json")

type peerVectorFile struct {
	About      string       `json:"about"`
	Handshakes []peerVector `json:"handshakes"`
}

// peerVector is one peer-port handshake. Byte strings are lowercase hex.
type peerVector struct {
	Name            string   `json:"name"`
	Version         int      `json:"version"` // 1: states nothing; 2: states id and addr
	Channel         string   `json:"channel"`
	ListenerSecrets []string `json:"listener_secrets_hex,omitempty"`
	DialerSecret    string   `json:"dialer_secret_hex,omitempty"`
	ID              string   `json:"id,omitempty"`
	Addr            string   `json:"addr,omitempty"`
	Ident           string   `json:"ident,omitempty"` // len(id) | id | len(addr) | addr
	ClientNonce     string   `json:"client_nonce,omitempty"`
	ServerNonce     string   `json:"server_nonce"`
	ClientInput     string   `json:"client_proof_input,omitempty"`
	ClientProof     string   `json:"client_proof,omitempty"`
	Accepted        bool     `json:"accepted"`
	ServerInput     string   `json:"server_proof_input,omitempty"`
	ServerProof     string   `json:"server_proof,omitempty"`
	ListenerHello   string   `json:"listener_hello"`
	DialerMessage   string   `json:"dialer_message"`
	Verdict         string   `json:"verdict"`
}

type peerCase struct {
	name     string
	version  int
	ch       byte
	listener [][]byte
	dialer   []byte
	id       Identity
}

func peerCases() []peerCase {
	n1 := Identity{ID: "n1", Addr: "10.0.0.1:7401"}
	return []peerCase{
		{name: "version 1, secret", version: 1, ch: ChannelRaft, listener: [][]byte{secretOld}, dialer: secretOld},
		{name: "version 2, secret", version: 2, ch: ChannelForward, listener: [][]byte{secretOld}, dialer: secretOld, id: n1},
		{name: "version 2, rotation: the dialer proves with the second secret", version: 2, ch: ChannelRaft,
			listener: [][]byte{secretNew, secretOld}, dialer: secretOld, id: n1},
		{name: "version 2, wrong secret", version: 2, ch: ChannelRaft, listener: [][]byte{secretOld}, dialer: secretWrong, id: n1},
		{name: "version 1, no secret", version: 1, ch: ChannelAdmin},
		{name: "version 2, no secret", version: 2, ch: ChannelAdmin, id: Identity{ID: "node-b", Addr: "[::1]:7401"}},
	}
}

func fixedNonces() (client, server [nonceSize]byte) {
	for i := range client {
		client[i], server[i] = byte(0x40+i), byte(0xA0+i)
	}
	return client, server
}

func genPeerVector(t *testing.T, pc peerCase) peerVector {
	t.Helper()
	cn, sn := fixedNonces()
	v := peerVector{Name: pc.name, Version: pc.version, Channel: string(pc.ch), ServerNonce: hex.EncodeToString(sn[:]), ID: pc.id.ID, Addr: pc.id.Addr}
	var ident []byte
	msg := []byte{pc.ch}
	if pc.version == 2 {
		ident = pc.id.encode(nil)
		v.Ident = hex.EncodeToString(ident)
		msg = append([]byte{identityMarker, pc.ch}, ident...)
	}
	hello := []byte{helloMagic, helloVersion, 0}
	verdict := []byte{verdictAccept}
	v.Accepted = true
	if len(pc.listener) > 0 {
		hello[2] = flagSecret
		for _, s := range pc.listener {
			v.ListenerSecrets = append(v.ListenerSecrets, hex.EncodeToString(s))
		}
		clientLabel, serverLabel := labels(ident)
		cp := proof(pc.dialer, clientLabel, pc.ch, ident, &cn, &sn)
		v.DialerSecret, v.ClientNonce = hex.EncodeToString(pc.dialer), hex.EncodeToString(cn[:])
		v.ClientInput, v.ClientProof = hex.EncodeToString(proofInput(clientLabel, pc.ch, ident, cn, sn)), hex.EncodeToString(cp[:])
		msg = append(append(msg, cn[:]...), cp[:]...)
		matched, ok := matchProof(pc.listener, pc.ch, ident, &cn, &sn, cp[:])
		v.Accepted = ok
		if ok {
			sp := proof(matched, serverLabel, pc.ch, ident, &cn, &sn)
			v.ServerInput, v.ServerProof = hex.EncodeToString(proofInput(serverLabel, pc.ch, ident, cn, sn)), hex.EncodeToString(sp[:])
			verdict = append(verdict, sp[:]...)
		} else {
			verdict = []byte{verdictReject}
		}
	}
	v.ListenerHello = hex.EncodeToString(append(hello, sn[:]...))
	v.DialerMessage, v.Verdict = hex.EncodeToString(msg), hex.EncodeToString(verdict)
	return v
}

func proofInput(label string, ch byte, ident []byte, cn, sn [nonceSize]byte) []byte {
	b := append([]byte(label), ch)
	b = append(b, ident...)
	b = append(b, cn[:]...)
	return append(b, sn[:]...)
}

func TestPeerVectorsUpToDate(t *testing.T) {
	f := peerVectorFile{About: "latch peer-port handshake test vectors; the format is described in docs/protocol.md, section 12"}
	for _, pc := range peerCases() {
		f.Handshakes = append(f.Handshakes, genPeerVector(t, pc))
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.WriteFile(peerVectorPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if old, err := os.ReadFile(peerVectorPath); err != nil || !bytes.Equal(old, b) {
		t.Fatalf("%s is not what the cases give (err %v): run go test ./cluster/peer -run TestPeerVectors -update and review the diff", peerVectorPath, err)
	}
}

func readPeerVectors(t *testing.T) []peerVector {
	t.Helper()
	b, err := os.ReadFile(peerVectorPath)
	if err != nil {
		t.Fatal(err)
	}
	var f peerVectorFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || len(f.Handshakes) == 0 {
		t.Fatalf("%s: %v, %d handshakes", peerVectorPath, err, len(f.Handshakes))
	}
	return f.Handshakes
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// vectorLabels are the labels as docs/protocol.md gives them, written out here rather than
// taken from handshake.go.
func vectorLabels(version int) (client, server string) {
	if version == 2 {
		return "latch/2 peer client", "latch/2 peer server"
	}
	return "latch/1 peer client", "latch/1 peer server"
}

// hmacOf is HMAC-SHA256 under secret of the parts, one after another.
func hmacOf(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// dialerPrefix is the dialer's message before its nonce and proof, and the ident a version 2
// proof covers, from the vector's fields.
func dialerPrefix(t *testing.T, v peerVector) (prefix, ident []byte) {
	t.Helper()
	if v.Version == 1 {
		return []byte(v.Channel), nil
	}
	ident = append(append([]byte{byte(len(v.ID))}, v.ID...), byte(len(v.Addr)))
	ident = append(ident, v.Addr...)
	if hex.EncodeToString(ident) != v.Ident {
		t.Fatalf("ident of %q and %q is %x, the vector says %s", v.ID, v.Addr, ident, v.Ident)
	}
	return append([]byte{'I', v.Channel[0]}, ident...), ident
}

// vectorProof is HMAC-SHA256(secret, label | ch | ident | client nonce | server nonce) and
// the message it is the HMAC of.
func vectorProof(secret []byte, label string, ch byte, ident, cn, sn []byte) (proof, input []byte) {
	input = append([]byte(label), ch)
	input = append(input, ident...)
	input = append(input, cn...)
	input = append(input, sn...)
	return hmacOf(secret, input), input
}

// TestPeerVectors checks each vector's bytes and proofs from its fields alone.
func TestPeerVectors(t *testing.T) {
	for _, v := range readPeerVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			sn := unhex(t, v.ServerNonce)
			flags := byte(0)
			if len(v.ListenerSecrets) > 0 {
				flags = 1
			}
			if want := append([]byte{'P', 1, flags}, sn...); hex.EncodeToString(want) != v.ListenerHello {
				t.Fatalf("listener hello %s, want %x", v.ListenerHello, want)
			}
			msg, ident := dialerPrefix(t, v)
			verdict := []byte{'y'}
			if flags == 1 {
				cl, sl := vectorLabels(v.Version)
				cn, secret := unhex(t, v.ClientNonce), unhex(t, v.DialerSecret)
				cp, input := vectorProof(secret, cl, v.Channel[0], ident, cn, sn)
				if hex.EncodeToString(input) != v.ClientInput || hex.EncodeToString(cp) != v.ClientProof {
					t.Fatalf("client proof %s of %s, want %x of %x", v.ClientProof, v.ClientInput, cp, input)
				}
				msg = append(append(msg, cn...), cp...)
				held := false
				for _, s := range v.ListenerSecrets {
					held = held || bytes.Equal(unhex(t, s), secret)
				}
				if held != v.Accepted {
					t.Fatalf("accepted %v, but the listener holding the dialer's secret is %v", v.Accepted, held)
				}
				verdict = []byte{'n'}
				if held {
					sp, sinput := vectorProof(secret, sl, v.Channel[0], ident, cn, sn)
					if hex.EncodeToString(sinput) != v.ServerInput || hex.EncodeToString(sp) != v.ServerProof {
						t.Fatalf("server proof %s of %s, want %x of %x", v.ServerProof, v.ServerInput, sp, sinput)
					}
					verdict = append([]byte{'y'}, sp...)
				}
			}
			if hex.EncodeToString(msg) != v.DialerMessage || hex.EncodeToString(verdict) != v.Verdict {
				t.Fatalf("dialer message %s and verdict %s, want %x and %x", v.DialerMessage, v.Verdict, msg, verdict)
			}
		})
	}
}

// TestPeerVectorsListener runs the real listener side of each vector over a pipe, the dialer
// being played from the vector's fields (its nonce; the listener's is fresh).
func TestPeerVectorsListener(t *testing.T) {
	for _, v := range readPeerVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			var secrets [][]byte
			for _, s := range v.ListenerSecrets {
				secrets = append(secrets, unhex(t, s))
			}
			l, d := net.Pipe()
			defer d.Close()
			type result struct {
				ch  byte
				id  Identity
				err error
			}
			done := make(chan result, 1)
			go func() {
				defer l.Close()
				ch, id, err := serveHandshake(l, secrets, func(byte) bool { return true })
				done <- result{ch, id, err}
			}()
			hello := make([]byte, helloSize)
			if _, err := io.ReadFull(d, hello); err != nil || hex.EncodeToString(hello[:3]) != v.ListenerHello[:6] {
				t.Fatalf("hello %x (%v), want it to start %s", hello, err, v.ListenerHello[:6])
			}
			sn := hello[3:]
			msg, ident := dialerPrefix(t, v)
			var cn []byte
			if len(secrets) > 0 {
				cl, _ := vectorLabels(v.Version)
				cn = unhex(t, v.ClientNonce)
				cp, _ := vectorProof(unhex(t, v.DialerSecret), cl, v.Channel[0], ident, cn, sn)
				msg = append(append(msg, cn...), cp...)
			}
			if _, err := d.Write(msg); err != nil {
				t.Fatal(err)
			}
			verdict := make([]byte, 1, 1+proofSize)
			if _, err := io.ReadFull(d, verdict); err != nil {
				t.Fatal(err)
			}
			if v.Accepted && len(secrets) > 0 {
				verdict = verdict[:1+proofSize]
				if _, err := io.ReadFull(d, verdict[1:]); err != nil {
					t.Fatal(err)
				}
				_, sl := vectorLabels(v.Version)
				sp, _ := vectorProof(unhex(t, v.DialerSecret), sl, v.Channel[0], ident, cn, sn)
				if !bytes.Equal(verdict[1:], sp) {
					t.Fatalf("listener proof %x, want %x", verdict[1:], sp)
				}
			}
			r := <-done
			if want := map[bool]byte{true: 'y', false: 'n'}[v.Accepted]; verdict[0] != want || (r.err == nil) != v.Accepted {
				t.Fatalf("verdict %q and error %v; the vector says accepted %v", verdict[0], r.err, v.Accepted)
			}
			if r.ch != v.Channel[0] || r.id != (Identity{ID: v.ID, Addr: v.Addr}) {
				t.Fatalf("listener read channel %q and identity %v, want %q and %s@%s", r.ch, r.id, v.Channel, v.ID, v.Addr)
			}
		})
	}
}

// TestPeerVectorsDialer runs the real dialer side of each vector over a pipe, the listener
// being played from the vector's fields (its hello and nonce; the dialer's nonce is fresh).
func TestPeerVectorsDialer(t *testing.T) {
	for _, v := range readPeerVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			var secrets [][]byte
			if v.DialerSecret != "" {
				secrets = [][]byte{unhex(t, v.DialerSecret)}
			}
			l, d := net.Pipe()
			defer l.Close()
			done := make(chan error, 1)
			go func() {
				defer d.Close()
				done <- dialHandshake(d, secrets, v.Channel[0], Identity{ID: v.ID, Addr: v.Addr})
			}()
			if _, err := l.Write(unhex(t, v.ListenerHello)); err != nil {
				t.Fatal(err)
			}
			prefix, ident := dialerPrefix(t, v)
			got := make([]byte, len(prefix))
			if _, err := io.ReadFull(l, got); err != nil || !bytes.Equal(got, prefix) {
				t.Fatalf("dialer wrote %x (%v), want %x", got, err, prefix)
			}
			verdict := []byte{'y'}
			if secrets != nil {
				rest := make([]byte, nonceSize+proofSize)
				if _, err := io.ReadFull(l, rest); err != nil {
					t.Fatal(err)
				}
				cl, sl := vectorLabels(v.Version)
				cn, sn := rest[:nonceSize], unhex(t, v.ServerNonce)
				if cp, _ := vectorProof(secrets[0], cl, v.Channel[0], ident, cn, sn); !bytes.Equal(rest[nonceSize:], cp) {
					t.Fatalf("dialer proof %x, want %x", rest[nonceSize:], cp)
				}
				sp, _ := vectorProof(secrets[0], sl, v.Channel[0], ident, cn, sn)
				verdict = append(verdict, sp...)
			}
			if !v.Accepted {
				verdict = []byte{'n'}
			}
			if _, err := l.Write(verdict); err != nil {
				t.Fatal(err)
			}
			if err := <-done; (err == nil) != v.Accepted {
				t.Fatalf("dialHandshake = %v; the vector says accepted %v", err, v.Accepted)
			}
		})
	}
}
