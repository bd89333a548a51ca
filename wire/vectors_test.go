package wire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"
)

// The language-neutral test vectors of docs/vectors (their format: docs/protocol.md, "Test
// vectors"). vectors_gen_test.go writes them from the decoder's case tables and the handshake
// cases; the tests here read the files back and check the code against them, so the files,
// the document that points at them and the code cannot drift apart.
//
//	go test ./wire -run TestVectors -update   rewrites docs/vectors/frames.json and handshake.json

var update = flag.Bool("update", false, "rewrite docs/vectors/*.json from the test tables")

// vectorDir is docs/vectors, seen from the package directory the tests run in.
var vectorDir = filepath.Join("..", "docs", "vectors")

// frameFile is docs/vectors/frames.json.
type frameFile struct {
	About     string        `json:"about"`
	Requests  []frameVector `json:"requests"`
	Responses []frameVector `json:"responses"`
}

// frameVector is one frame: its bytes and either its decoded fields (a good frame: Op is set)
// or the structural error latch's decoder finds in it (Error is set). Integers of 64 bits
// are decimal strings, byte strings are lowercase hex; a key is a JSON string when it is
// valid UTF-8 and key_hex otherwise.
type frameVector struct {
	Name    string  `json:"name"`
	Hex     string  `json:"hex"`
	Op      string  `json:"op,omitempty"`
	Owner   *string `json:"owner,omitempty"`
	Wait    *uint8  `json:"wait,omitempty"`
	Lease   *uint16 `json:"lease,omitempty"`
	Token   *string `json:"token,omitempty"`
	Key     *string `json:"key,omitempty"`
	KeyHex  *string `json:"key_hex,omitempty"`
	Reason  *string `json:"reason,omitempty"`
	Version *uint8  `json:"version,omitempty"`
	Flags   *uint8  `json:"flags,omitempty"`
	Nonce   *string `json:"nonce,omitempty"`
	Proof   *string `json:"proof,omitempty"`
	Age     *uint32 `json:"age_ms,omitempty"` // G (rev2.json)
	// Connection (rev2.json only) is the connection the frame is decoded on: "latch1", or
	// "revised" (FlagLeases negotiated).
	Connection string `json:"connection,omitempty"`
	// Check (requests only) is the E reason a server that finished the handshake answers
	// this structurally sound request with, or "ok".
	Check string `json:"check,omitempty"`
	// Error is the structural fault (errorNames); Offset the byte of the frame, counted
	// from 1, at which latch's decoder detects it.
	Error  string `json:"error,omitempty"`
	Offset int    `json:"offset,omitempty"`
}

// errorNames are the names of the structural errors in the vectors. "truncated" is a frame
// the stream ends inside of: no decoder error, but an unfinished frame.
var errorNames = map[error]string{
	ErrUnknownOp:      "unknown_op",
	ErrOversized:      "oversized",
	ErrUnexpectedTail: "unexpected_tail",
	ErrBadReason:      "bad_reason",
}

const errTruncated = "truncated"

// handshakeFile is docs/vectors/handshake.json.
type handshakeFile struct {
	About       string            `json:"about"`
	Handshakes  []handshakeVector `json:"handshakes"`
	SecretFiles []secretVector    `json:"secret_files"`
}

// handshakeVector is one handshake on the client port with fixed nonces: the proofs (when the
// server asks for auth), the message each proof is the HMAC-SHA256 of, and every frame in the
// order sent.
type handshakeVector struct {
	Name          string   `json:"name"`
	ServerSecrets []string `json:"server_secrets_hex,omitempty"` // the server's secret file, in order
	ClientSecret  string   `json:"client_secret_hex,omitempty"`
	ClientNonce   string   `json:"client_nonce,omitempty"`
	ServerNonce   string   `json:"server_nonce,omitempty"`
	ClientInput   string   `json:"client_proof_input,omitempty"`
	ClientProof   string   `json:"client_proof,omitempty"`
	Accepted      *bool    `json:"accepted,omitempty"` // does a server secret match the client proof
	ServerInput   string   `json:"server_proof_input,omitempty"`
	ServerProof   string   `json:"server_proof,omitempty"`
	// Revisions (rev2.json only) are the revisions in force once the hellos are exchanged
	// (AcceptFlags), ClientError what the client makes of a server hello it must refuse.
	Revisions   *uint8 `json:"revisions,omitempty"`
	ClientError string `json:"client_error,omitempty"`
	Frames      []sent `json:"frames"`
}

// sent is one frame of an exchange and who sent it ("client" or "server").
type sent struct {
	From string `json:"from"`
	Hex  string `json:"hex"`
}

// secretVector is a secret file and the secrets read from it, or the error (too_short with
// the line, or no_secrets).
type secretVector struct {
	Name    string   `json:"name"`
	Content string   `json:"content"`
	Secrets []string `json:"secrets_hex,omitempty"`
	Error   string   `json:"error,omitempty"`
	Line    int      `json:"line,omitempty"`
}

func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatalf("%v (run go test ./wire -run TestVectors -update to write it)", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// TestVectorsUpToDate regenerates the vector files and compares them with docs/vectors; with
// -update it writes them instead.
func TestVectorsUpToDate(t *testing.T) {
	for name, v := range map[string]any{"frames.json": genFrames(t), "handshake.json": genHandshakes(t)} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, '\n')
		path := filepath.Join(vectorDir, name)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(old, b) {
			t.Errorf("%s is not what the test tables give (err %v): run go test ./wire -run TestVectors -update and review the diff", path, err)
		}
	}
}

// TestVectorsFrames decodes every frame of frames.json: a good one must give exactly its
// fields and encode back to the same bytes, a bad one the listed error at the listed byte.
func TestVectorsFrames(t *testing.T) {
	var f frameFile
	readVectors(t, "frames.json", &f)
	if len(f.Requests) == 0 || len(f.Responses) == 0 {
		t.Fatal("frames.json holds no requests or no responses")
	}
	for _, dir := range []struct {
		name    string
		vs      []frameVector
		request bool
	}{{"request", f.Requests, true}, {"response", f.Responses, false}} {
		for _, v := range dir.vs {
			t.Run(dir.name+"/"+v.Name, func(t *testing.T) {
				in := unhex(t, v.Hex)
				d := NewResponseDecoder()
				if dir.request {
					d = NewRequestDecoder()
				}
				evs := feed(t, d, in)
				if len(evs) != 1 {
					t.Fatalf("got %d events, want 1: %s", len(evs), dump(evs))
				}
				checkVectorEvent(t, v, in, evs[0])
			})
		}
	}
}

func checkVectorEvent(t *testing.T, v frameVector, in []byte, ev event) {
	t.Helper()
	switch {
	case v.Error == errTruncated:
		if !ev.partial || !bytes.Equal(ev.raw, in) {
			t.Fatalf("want the frame left unfinished, got %s", dump([]event{ev}))
		}
	case v.Error != "":
		var fe *FrameError
		if !errors.As(ev.err, &fe) || errorNames[fe.Err] != v.Error || fe.Offset != v.Offset {
			t.Fatalf("err = %v, want %s at byte %d", ev.err, v.Error, v.Offset)
		}
	case ev.req != nil:
		if got := requestVector(v.Name, in, ev.req); !reflect.DeepEqual(got, v) {
			t.Fatalf("decoded as\n%s\nwant\n%s", jsonOf(got), jsonOf(v))
		}
		if got := AppendRequest(nil, ev.req); !bytes.Equal(got, in) {
			t.Fatalf("fields encode as %x, want %s", got, v.Hex)
		}
	case ev.resp != nil:
		if got := responseVector(v.Name, in, ev.resp); !reflect.DeepEqual(got, v) {
			t.Fatalf("decoded as\n%s\nwant\n%s", jsonOf(got), jsonOf(v))
		}
		if got := AppendResponse(nil, ev.resp); !bytes.Equal(got, in) {
			t.Fatalf("fields encode as %x, want %s", got, v.Hex)
		}
	default:
		t.Fatalf("want a frame, got %s", dump([]event{ev}))
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// requestVector is the vector of a decoded request: only the fields of its op.
func requestVector(name string, in []byte, r *Request) frameVector {
	v := frameVector{Name: name, Hex: hex.EncodeToString(in), Op: r.Op.String(), Check: "ok"}
	if c := r.Check(); c != "" {
		v.Check = string(c)
	}
	switch r.Op {
	case OpAcquire:
		v.Owner, v.Wait, v.Lease = dec64(r.Owner), &r.Wait, &r.Lease
		v.setKey(r.Key)
	case OpRelease:
		v.Owner, v.Token = dec64(r.Owner), dec64(r.Token)
		v.setKey(r.Key)
	case OpExtend:
		v.Owner, v.Token, v.Lease = dec64(r.Owner), dec64(r.Token), &r.Lease
		v.setKey(r.Key)
	case OpPing:
		v.Owner = dec64(r.Owner)
	case OpHello:
		v.setHello(r.Hello)
	case OpProof:
		v.Proof = hexOf(r.Proof[:])
	}
	return v
}

// responseVector is the vector of a decoded response: only the fields of its op.
func responseVector(name string, in []byte, r *Response) frameVector {
	v := frameVector{Name: name, Hex: hex.EncodeToString(in), Op: r.Op.String()}
	switch r.Op {
	case OpAcquire:
		v.Owner, v.Token = dec64(r.Owner), dec64(r.Token)
	case OpGranted:
		v.Owner, v.Token, v.Age = dec64(r.Owner), dec64(r.Token), &r.Age
	case OpTimeout, OpBusy, OpRelease, OpNotHeld, OpPing, OpExtend:
		v.Owner = dec64(r.Owner)
	case OpError:
		reason := string(r.Reason)
		v.Owner, v.Reason = dec64(r.Owner), &reason
	case OpHello:
		v.setHello(r.Hello)
	case OpProof:
		v.Proof = hexOf(r.Proof[:])
	}
	return v
}

func (v *frameVector) setKey(k []byte) {
	s := string(k)
	if utf8.ValidString(s) {
		v.Key = &s
	} else {
		v.KeyHex = hexOf(k)
	}
}

func (v *frameVector) setHello(h Hello) {
	v.Version, v.Flags, v.Nonce = &h.Version, &h.Flags, hexOf(h.Nonce[:])
}

func dec64(x uint64) *string { s := strconv.FormatUint(x, 10); return &s }
func hexOf(b []byte) *string { s := hex.EncodeToString(b); return &s }

// TestVectorsHandshake checks every handshake of handshake.json: each proof is the HMAC-SHA256
// of its listed input under the secret and equals what ClientProof and ServerProof give, the
// server accepts the client proof exactly when the vector says so (with the secret it then
// proves with), and every frame decodes in its direction and carries the listed nonces and
// proofs.
func TestVectorsHandshake(t *testing.T) {
	var f handshakeFile
	readVectors(t, "handshake.json", &f)
	if len(f.Handshakes) == 0 || len(f.SecretFiles) == 0 {
		t.Fatal("handshake.json holds no handshakes or no secret files")
	}
	for _, v := range f.Handshakes {
		t.Run(v.Name, func(t *testing.T) { checkHandshakeVector(t, v) })
	}
	for _, v := range f.SecretFiles {
		t.Run("secret file/"+v.Name, func(t *testing.T) {
			got := secretVectorOf(v.Name, v.Content)
			if !reflect.DeepEqual(got, v) {
				t.Fatalf("ParseSecrets gives\n%s\nwant\n%s", jsonOf(got), jsonOf(v))
			}
		})
	}
}

func checkHandshakeVector(t *testing.T, v handshakeVector) {
	t.Helper()
	cn, sn := nonceOf(t, v.ClientNonce), nonceOf(t, v.ServerNonce)
	var cp, sp [ProofSize]byte
	if v.ClientSecret != "" {
		secret := unhex(t, v.ClientSecret)
		cp = checkProof(t, "client", secret, clientLabel, cn, sn, v.ClientInput, v.ClientProof)
		if got := ClientProof(secret, cn, sn); got != cp {
			t.Fatalf("ClientProof = %x, want %s", got, v.ClientProof)
		}
		var secrets [][]byte
		for _, s := range v.ServerSecrets {
			secrets = append(secrets, unhex(t, s))
		}
		matched, ok := MatchClientProof(secrets, cn, sn, cp)
		if v.Accepted == nil || ok != *v.Accepted {
			t.Fatalf("the server's secrets accept the client proof: %v, want %v", ok, v.Accepted)
		}
		if ok {
			sp = checkProof(t, "server", matched, serverLabel, cn, sn, v.ServerInput, v.ServerProof)
			if got := ServerProof(matched, cn, sn); got != sp {
				t.Fatalf("ServerProof = %x, want %s", got, v.ServerProof)
			}
		}
	}
	for i, f := range v.Frames {
		in := unhex(t, f.Hex)
		d := NewRequestDecoder()
		if f.From == "server" {
			d = NewResponseDecoder()
		} else if f.From != "client" {
			t.Fatalf("frame %d: from %q, want client or server", i, f.From)
		}
		evs := feed(t, d, in)
		if len(evs) != 1 || (evs[0].req == nil && evs[0].resp == nil) {
			t.Fatalf("frame %d (%s) is not one good frame: %s", i, f.Hex, dump(evs))
		}
		var op Op
		var h Hello
		var p [ProofSize]byte
		if r := evs[0].req; r != nil {
			op, h, p = r.Op, r.Hello, r.Proof
		} else {
			op, h, p = evs[0].resp.Op, evs[0].resp.Hello, evs[0].resp.Proof
		}
		switch {
		case op == OpHello && f.From == "client" && h.Nonce != cn,
			op == OpHello && f.From == "server" && h.Nonce != sn:
			t.Fatalf("frame %d: hello nonce %x is not the vector's %s nonce", i, h.Nonce, f.From)
		case op == OpHello && f.From == "server" && (h.Flags == FlagAuthRequired) != (len(v.ServerSecrets) > 0):
			t.Fatalf("frame %d: server hello flags %d with %d server secrets", i, h.Flags, len(v.ServerSecrets))
		case op == OpProof && f.From == "client" && p != cp,
			op == OpProof && f.From == "server" && p != sp:
			t.Fatalf("frame %d: proof %x is not the vector's %s proof", i, p, f.From)
		}
	}
}

// checkProof checks that input is label | client nonce | server nonce and that want is its
// HMAC-SHA256 under secret, computed here without the package's proof code.
func checkProof(t *testing.T, who string, secret []byte, label string, cn, sn [NonceSize]byte, input, want string) [ProofSize]byte {
	t.Helper()
	msg := append(append([]byte(label), cn[:]...), sn[:]...)
	if got := unhex(t, input); !bytes.Equal(got, msg) {
		t.Fatalf("%s proof input %s, want %x", who, input, msg)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(msg)
	if got := m.Sum(nil); hex.EncodeToString(got) != want {
		t.Fatalf("%s proof: HMAC-SHA256 of its input is %x, want %s", who, got, want)
	}
	return [ProofSize]byte(unhex(t, want))
}

func nonceOf(t *testing.T, s string) [NonceSize]byte {
	t.Helper()
	if s == "" {
		return [NonceSize]byte{}
	}
	b := unhex(t, s)
	if len(b) != NonceSize {
		t.Fatalf("nonce %s is %d bytes, want %d", s, len(b), NonceSize)
	}
	return [NonceSize]byte(b)
}

// secretVectorOf is the vector ParseSecrets gives for a secret file's content.
func secretVectorOf(name, content string) secretVector {
	v := secretVector{Name: name, Content: content}
	secrets, err := ParseSecrets([]byte(content))
	switch {
	case errors.Is(err, ErrNoSecrets):
		v.Error = "no_secrets"
	case errors.Is(err, ErrSecretTooShort):
		v.Error = "too_short"
		fmt.Sscanf(err.Error(), "wire: secret file line %d:", &v.Line)
	case err != nil:
		v.Error = err.Error()
	}
	for _, s := range secrets {
		v.Secrets = append(v.Secrets, hex.EncodeToString(s))
	}
	return v
}
