package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// The generator side of docs/vectors: frames.json is the decoder's case tables
// (requestCases, responseCases in decode_test.go, written byte by byte), handshake.json the
// cases below. Each says what it expects by hand; the generator fails when the code
// disagrees, so a vector file is never written from a wrong result.

const vectorsAbout = "latch/1 test vectors; the format is described in docs/protocol.md, section 11 (Test vectors)"

func genFrames(t *testing.T) frameFile {
	t.Helper()
	f := frameFile{About: vectorsAbout}
	seen := map[string]bool{}
	unique := func(name string) {
		if seen[name] {
			t.Fatalf("two cases named %q", name)
		}
		seen[name] = true
	}
	for _, tc := range requestCases() {
		unique("request " + tc.name)
		v := badVector(tc.name, tc.in, tc.err, tc.off)
		if tc.want != nil {
			v = requestVector(tc.name, tc.in, tc.want)
			if want := string(tc.check); v.Check != want && !(want == "" && v.Check == "ok") {
				t.Fatalf("request %q: Check gives %s, the table says %q", tc.name, v.Check, want)
			}
		}
		f.Requests = append(f.Requests, v)
	}
	for _, tc := range responseCases() {
		unique("response " + tc.name)
		v := badVector(tc.name, tc.in, tc.err, tc.off)
		if tc.want != nil {
			v = responseVector(tc.name, tc.in, tc.want)
		}
		f.Responses = append(f.Responses, v)
	}
	return f
}

// badVector is the vector of a case with a structural error, or of one cut short (err nil).
func badVector(name string, in []byte, err error, off int) frameVector {
	v := frameVector{Name: name, Hex: hex.EncodeToString(in), Error: errTruncated}
	if err != nil {
		v.Error, v.Offset = errorNames[err], off
	}
	return v
}

// handshakeCase is one client-port handshake, as a server and a client that follow the
// protocol run it with these secrets and nonces.
type handshakeCase struct {
	name          string
	serverSecrets []string // nil: the server asks for no auth
	clientSecret  string   // "": the client has none
	cn, sn        [NonceSize]byte
	accepted      bool   // a server secret matches the client's proof
	first         []byte // when set, the client's first frame instead of its hello
	end           []byte // when set, the server's last frame (an E that closes)
	after         bool   // after the handshake, one ping and its pong
}

func counting(from byte) (n [NonceSize]byte) {
	for i := range n {
		n[i] = from + byte(i)
	}
	return n
}

var (
	secretPinned = "0123456789abcdef0123456789abcdef"                                 // TestProofKnownAnswer's, checked against Python
	secretHexOut = "9f2c4e7a1b3d5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8" // an `openssl rand -hex 32` line
	secretOld    = "old-secret-old-secret-old-secret-1"
	secretNew    = "new-secret-new-secret-new-secret-2"
)

func handshakeCases() []handshakeCase {
	e := func(owner uint64, r Reason) []byte {
		return AppendResponse(nil, &Response{Op: OpError, Owner: owner, Reason: r})
	}
	return []handshakeCase{
		{name: "auth", serverSecrets: []string{secretPinned}, clientSecret: secretPinned,
			cn: counting(0), sn: counting(32), accepted: true, after: true},
		{name: "auth, a hex line is a secret of its 64 ASCII bytes", serverSecrets: []string{secretHexOut}, clientSecret: secretHexOut,
			cn: nonce(0x11), sn: nonce(0x0A), accepted: true},
		{name: "rotation: the client proves with the server's second secret", serverSecrets: []string{secretNew, secretOld}, clientSecret: secretOld,
			cn: counting(100), sn: counting(200), accepted: true},
		{name: "wrong secret", serverSecrets: []string{secretNew}, clientSecret: secretOld,
			cn: counting(100), sn: counting(200), end: e(0, ReasonAuthFailed)},
		{name: "no auth", cn: counting(64), sn: counting(96), after: true},
		{name: "unsupported version", cn: counting(64),
			first: AppendRequest(nil, &Request{Op: OpHello, Hello: Hello{Version: 2, Nonce: counting(64)}}), end: e(0, ReasonBadVersion)},
		{name: "request before the handshake",
			first: AppendRequest(nil, &Request{Op: OpPing, Owner: 7}), end: e(7, ReasonAuthRequired)},
	}
}

func genHandshakes(t *testing.T) handshakeFile {
	t.Helper()
	f := handshakeFile{About: vectorsAbout}
	for _, hc := range handshakeCases() {
		f.Handshakes = append(f.Handshakes, genHandshake(t, hc))
	}
	for _, sc := range []struct{ name, content string }{
		{"one secret", secretPinned + "\n"},
		{"two secrets: the first is the one clients prove with", secretNew + "\n" + secretOld + "\n"},
		{"CRLF, padding and blank lines", "\r\n  " + secretHexOut + "\t\r\n\n" + secretOld},
		{"a secret shorter than 32 bytes", secretPinned + "\n\nshort-secret\n"},
		{"no secret", "\n \r\n"},
	} {
		f.SecretFiles = append(f.SecretFiles, secretVectorOf(sc.name, sc.content))
	}
	return f
}

func genHandshake(t *testing.T, hc handshakeCase) handshakeVector {
	t.Helper()
	v := handshakeVector{Name: hc.name}
	client := func(r *Request) {
		v.Frames = append(v.Frames, sent{"client", hex.EncodeToString(AppendRequest(nil, r))})
	}
	server := func(r *Response) {
		v.Frames = append(v.Frames, sent{"server", hex.EncodeToString(AppendResponse(nil, r))})
	}
	if hc.first != nil {
		v.Frames = append(v.Frames, sent{"client", hex.EncodeToString(hc.first)})
		if bytes.HasPrefix(hc.first, []byte{'H'}) {
			v.ClientNonce = hex.EncodeToString(hc.cn[:])
		}
		v.Frames = append(v.Frames, sent{"server", hex.EncodeToString(hc.end)})
		return v
	}
	v.ClientNonce, v.ServerNonce = hex.EncodeToString(hc.cn[:]), hex.EncodeToString(hc.sn[:])
	client(&Request{Op: OpHello, Hello: Hello{Version: Version, Nonce: hc.cn}})
	var flags uint8
	for _, s := range hc.serverSecrets {
		flags = FlagAuthRequired
		v.ServerSecrets = append(v.ServerSecrets, hex.EncodeToString([]byte(s)))
	}
	server(&Response{Op: OpHello, Hello: Hello{Version: Version, Flags: flags, Nonce: hc.sn}})
	if hc.clientSecret != "" {
		secret := []byte(hc.clientSecret)
		cp := ClientProof(secret, hc.cn, hc.sn)
		v.ClientSecret = hex.EncodeToString(secret)
		v.ClientInput = hex.EncodeToString(proofInput(clientLabel, hc.cn, hc.sn))
		v.ClientProof = hex.EncodeToString(cp[:])
		client(&Request{Op: OpProof, Proof: cp})
		var serverSecrets [][]byte
		for _, s := range hc.serverSecrets {
			serverSecrets = append(serverSecrets, []byte(s))
		}
		matched, ok := MatchClientProof(serverSecrets, hc.cn, hc.sn, cp)
		if ok != hc.accepted || ok && string(matched) != hc.clientSecret {
			t.Fatalf("handshake %q: the server's secrets match the client proof: %v (%q), the case says %v", hc.name, ok, matched, hc.accepted)
		}
		v.Accepted = &ok
		if ok {
			sp := ServerProof(matched, hc.cn, hc.sn)
			v.ServerInput = hex.EncodeToString(proofInput(serverLabel, hc.cn, hc.sn))
			v.ServerProof = hex.EncodeToString(sp[:])
			server(&Response{Op: OpProof, Proof: sp})
		}
	}
	if hc.end != nil {
		v.Frames = append(v.Frames, sent{"server", hex.EncodeToString(hc.end)})
	}
	if hc.after {
		client(&Request{Op: OpPing, Owner: 1})
		server(&Response{Op: OpPing, Owner: 1})
	}
	return v
}

func proofInput(label string, cn, sn [NonceSize]byte) []byte {
	return append(append([]byte(label), cn[:]...), sn[:]...)
}
