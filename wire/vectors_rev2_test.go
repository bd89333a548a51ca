package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// docs/vectors/rev2.json: the test vectors of revision 2 (FlagLeases), described in
// docs/protocol.md section 11. They live apart from frames.json and handshake.json,
// which stay the latch/1 contract of docs/protocol.md byte for byte. The frames come from the
// case tables of leases_test.go, the rest from the tables below; as for latch/1, the generator
// checks every vector against the code before it is written, and TestVectorsRev2 reads the
// file back.
//
//	go test ./wire -run TestVectors -update   rewrites docs/vectors/rev2.json too

const rev2About = "latch/1 revision 2 (FlagLeases) test vectors; the format is described in docs/protocol.md, section 11 (Test vectors)"

// rev2File is docs/vectors/rev2.json.
type rev2File struct {
	About      string            `json:"about"`
	Echo       []echoVector      `json:"echo"`
	Accept     []acceptVector    `json:"accept"`
	Requests   []frameVector     `json:"requests"`
	Responses  []frameVector     `json:"responses"`
	Handshakes []handshakeVector `json:"handshakes"`
}

// echoVector is the server's side of the negotiation: the flags of the client's hello, the
// revisions the server implements and whether it asks for auth give its hello's flags, whose
// offer bits are the revisions in force.
type echoVector struct {
	Name        string `json:"name"`
	ClientFlags uint8  `json:"client_flags"`
	Supported   uint8  `json:"supported"`
	Auth        bool   `json:"auth"`
	ServerFlags uint8  `json:"server_flags"`
	Revisions   uint8  `json:"revisions"`
}

// acceptVector is the client's side: the flags it offered and those of the server's hello give
// the revisions in force, or the error not_offered (drop the connection).
type acceptVector struct {
	Name        string `json:"name"`
	Offered     uint8  `json:"offered"`
	ServerFlags uint8  `json:"server_flags"`
	Revisions   *uint8 `json:"revisions,omitempty"`
	Error       string `json:"error,omitempty"`
}

const connLatch1, connRevised = "latch1", "revised"

func genRev2(t *testing.T) rev2File {
	t.Helper()
	f := rev2File{About: rev2About}
	for _, e := range []struct {
		name                   string
		client, supported, out uint8
		auth                   bool
	}{
		{"latch/1 client, latch/1 server", 0, 0, 0, false},
		{"latch/1 client, revised server: latch/1", 0, FlagLeases, 0, false},
		{"revised client, latch/1 server: latch/1", FlagLeases, 0, 0, false},
		{"revised client, revised server", FlagLeases, FlagLeases, FlagLeases, false},
		{"revised client, revised server, auth", FlagLeases, FlagLeases, FlagLeases, true},
		{"revised client, latch/1 server, auth", FlagLeases, 0, 0, true},
		{"unknown client bits are ignored", 0xFF, FlagLeases, FlagLeases, false},
		{"unknown client bits alone give latch/1", 0xFD, FlagLeases, 0, true},
		{"bit 0 from a client means nothing", FlagAuthRequired, FlagLeases, 0, false},
	} {
		flags := EchoFlags(e.client, e.supported)
		if flags != e.out {
			t.Fatalf("echo %q: EchoFlags gives %#x, the table says %#x", e.name, flags, e.out)
		}
		v := echoVector{Name: e.name, ClientFlags: e.client, Supported: e.supported, Auth: e.auth, Revisions: flags, ServerFlags: flags}
		if e.auth {
			v.ServerFlags |= FlagAuthRequired
		}
		f.Echo = append(f.Echo, v)
	}
	for _, a := range []struct {
		name                   string
		offered, server, flags uint8
		err                    error
	}{
		{"latch/1 server, no auth", FlagLeases, 0, 0, nil},
		{"latch/1 server, auth", FlagLeases, FlagAuthRequired, 0, nil},
		{"revised", FlagLeases, FlagLeases, FlagLeases, nil},
		{"revised, auth", FlagLeases, FlagAuthRequired | FlagLeases, FlagLeases, nil},
		{"bits no revision defines are ignored", FlagLeases, 0xFC, 0, nil},
		{"bits no revision defines are ignored, with the echo", FlagLeases, 0xFF, FlagLeases, nil},
		{"an echo the client did not offer", 0, FlagLeases, 0, ErrFlagNotOffered},
		{"an echo the client did not offer, auth", 0, FlagAuthRequired | FlagLeases, 0, ErrFlagNotOffered},
	} {
		flags, err := AcceptFlags(a.offered, a.server)
		if flags != a.flags || !errors.Is(err, a.err) {
			t.Fatalf("accept %q: AcceptFlags gives %#x, %v; the table says %#x, %v", a.name, flags, err, a.flags, a.err)
		}
		f.Accept = append(f.Accept, acceptVectorOf(a.name, a.offered, a.server))
	}
	seen := map[string]bool{}
	unique := func(name string) {
		if seen[name] {
			t.Fatalf("two cases named %q", name)
		}
		seen[name] = true
	}
	for _, set := range []struct {
		conn  string
		cases []requestCase
	}{{connRevised, leasesRequestCases()}, {connLatch1, leasesV1RequestCases()}} {
		for _, tc := range set.cases {
			unique("request " + tc.name)
			v := badVector(tc.name, tc.in, tc.err, tc.off)
			if tc.want != nil {
				v = requestVector(tc.name, tc.in, tc.want)
				if want := string(tc.check); v.Check != want && !(want == "" && v.Check == "ok") {
					t.Fatalf("request %q: Check gives %s, the table says %q", tc.name, v.Check, want)
				}
			}
			v.Connection = set.conn
			f.Requests = append(f.Requests, v)
		}
	}
	for _, set := range []struct {
		conn  string
		cases []responseCase
	}{{connRevised, leasesResponseCases()}, {connLatch1, leasesV1ResponseCases()}} {
		for _, tc := range set.cases {
			unique("response " + tc.name)
			v := badVector(tc.name, tc.in, tc.err, tc.off)
			if tc.want != nil {
				v = responseVector(tc.name, tc.in, tc.want)
			}
			v.Connection = set.conn
			f.Responses = append(f.Responses, v)
		}
	}
	for _, hc := range revisedHandshakeCases() {
		v := genRevisedHandshake(t, hc)
		checkRevisedHandshake(t, v)
		f.Handshakes = append(f.Handshakes, v)
	}
	return f
}

func acceptVectorOf(name string, offered, server uint8) acceptVector {
	v := acceptVector{Name: name, Offered: offered, ServerFlags: server}
	flags, err := AcceptFlags(offered, server)
	switch {
	case errors.Is(err, ErrFlagNotOffered):
		v.Error = "not_offered"
	case err != nil:
		v.Error = err.Error()
	default:
		v.Revisions = &flags
	}
	return v
}

// exchange is one request after the handshake and the answer it gets.
type exchange struct {
	req  Request
	resp Response
}

// revisedHandshakeCase is a handshake between a client that offers flags and a server that
// implements supported, then the requests and answers that follow. echo, when set, is the
// offer bits of a broken server's hello instead of EchoFlags'.
type revisedHandshakeCase struct {
	name                   string
	secret                 string // both ends; "" for none
	cn, sn                 [NonceSize]byte
	clientFlags, supported uint8
	echo                   *uint8
	after                  []exchange
}

func revisedHandshakeCases() []revisedHandshakeCase {
	key := []byte("orders/42")
	acquire := Request{Op: OpAcquire, Owner: 1, Wait: 10, Lease: 30, Key: key}
	extend := Request{Op: OpExtend, Owner: 2, Token: 77, Lease: 60, Key: key}
	release := Request{Op: OpRelease, Owner: 3, Token: 77, Key: key}
	broken := uint8(FlagLeases)
	return []revisedHandshakeCase{
		{name: "revised, auth: the proofs are latch/1's for these nonces, the flags are not in them",
			secret: secretPinned, cn: counting(0), sn: counting(32), clientFlags: FlagLeases, supported: FlagLeases,
			after: []exchange{
				{acquire, Response{Op: OpGranted, Owner: 1, Token: 77, Age: 4250}},
				{extend, Response{Op: OpExtend, Owner: 2}},
				{release, Response{Op: OpRelease, Owner: 3}},
			}},
		{name: "revised, no auth: extend not held, and unsupported by the leader",
			cn: counting(64), sn: counting(96), clientFlags: FlagLeases, supported: FlagLeases,
			after: []exchange{
				{acquire, Response{Op: OpGranted, Owner: 1, Token: 77}},
				{Request{Op: OpExtend, Owner: 2, Token: 76, Lease: 60, Key: key}, Response{Op: OpNotHeld, Owner: 2}},
				{Request{Op: OpExtend, Owner: 4, Token: 77, Lease: 60, Key: key}, Response{Op: OpError, Owner: 4, Reason: ReasonUnsupported}},
			}},
		{name: "revised client, latch/1 server: latch/1, the grant is an A",
			secret: secretPinned, cn: counting(0), sn: counting(32), clientFlags: FlagLeases,
			after: []exchange{{acquire, Response{Op: OpAcquire, Owner: 1, Token: 77}}}},
		{name: "latch/1 client, revised server: latch/1, the grant is an A",
			cn: counting(64), sn: counting(96), supported: FlagLeases,
			after: []exchange{{acquire, Response{Op: OpAcquire, Owner: 1, Token: 77}}}},
		{name: "a server that echoes an offer not made: the client drops it",
			cn: counting(64), sn: counting(96), echo: &broken},
	}
}

func genRevisedHandshake(t *testing.T, hc revisedHandshakeCase) handshakeVector {
	t.Helper()
	v := handshakeVector{Name: hc.name, ClientNonce: hex.EncodeToString(hc.cn[:]), ServerNonce: hex.EncodeToString(hc.sn[:])}
	client := func(r *Request) {
		v.Frames = append(v.Frames, sent{"client", hex.EncodeToString(AppendRequest(nil, r))})
	}
	server := func(r *Response) {
		v.Frames = append(v.Frames, sent{"server", hex.EncodeToString(AppendResponse(nil, r))})
	}
	client(&Request{Op: OpHello, Hello: Hello{Version: Version, Flags: hc.clientFlags, Nonce: hc.cn}})
	flags := EchoFlags(hc.clientFlags, hc.supported)
	if hc.echo != nil {
		flags = *hc.echo
	}
	if hc.secret != "" {
		flags |= FlagAuthRequired
		v.ServerSecrets = []string{hex.EncodeToString([]byte(hc.secret))}
	}
	server(&Response{Op: OpHello, Hello: Hello{Version: Version, Flags: flags, Nonce: hc.sn}})
	revisions, err := AcceptFlags(hc.clientFlags, flags)
	if err != nil {
		v.ClientError = "not_offered"
		return v
	}
	v.Revisions = &revisions
	if hc.secret != "" {
		secret := []byte(hc.secret)
		cp, sp := ClientProof(secret, hc.cn, hc.sn), ServerProof(secret, hc.cn, hc.sn)
		accepted := true
		v.ClientSecret, v.Accepted = hex.EncodeToString(secret), &accepted
		v.ClientInput = hex.EncodeToString(proofInput(clientLabel, hc.cn, hc.sn))
		v.ClientProof = hex.EncodeToString(cp[:])
		v.ServerInput = hex.EncodeToString(proofInput(serverLabel, hc.cn, hc.sn))
		v.ServerProof = hex.EncodeToString(sp[:])
		client(&Request{Op: OpProof, Proof: cp})
		server(&Response{Op: OpProof, Proof: sp})
	}
	for _, x := range hc.after {
		client(&x.req)
		server(&x.resp)
	}
	return v
}

// checkRevisedHandshake plays a handshake vector of rev2.json as a connection does: one request
// decoder for the server, one response decoder for the client, each switched to the revisions
// in force right after the hellos. Every frame must decode as one good frame, the revisions
// and the client's error must be what the vector says, the proofs must be the HMAC-SHA256 of
// their inputs, and every answer must answer the request with its owner.
func checkRevisedHandshake(t *testing.T, v handshakeVector) {
	t.Helper()
	cn, sn := nonceOf(t, v.ClientNonce), nonceOf(t, v.ServerNonce)
	var cp, sp [ProofSize]byte
	if v.ClientSecret != "" {
		secret := unhex(t, v.ClientSecret)
		cp = checkProof(t, "client", secret, clientLabel, cn, sn, v.ClientInput, v.ClientProof)
		sp = checkProof(t, "server", secret, serverLabel, cn, sn, v.ServerInput, v.ServerProof)
		if len(v.ServerSecrets) != 1 || v.ServerSecrets[0] != v.ClientSecret || v.Accepted == nil || !*v.Accepted {
			t.Fatalf("%s: a revised handshake vector has one secret on both ends, accepted", v.Name)
		}
	}
	serverDec, clientDec := NewRequestDecoder(), NewResponseDecoder()
	var offered uint8
	pending := map[uint64]Op{}
	for i, f := range v.Frames {
		d := serverDec
		if f.From == "server" {
			d = clientDec
		}
		evs := feed(t, d, unhex(t, f.Hex))
		if len(evs) != 1 || (evs[0].req == nil && evs[0].resp == nil) {
			t.Fatalf("%s: frame %d (%s, %s) is not one good frame: %s", v.Name, i, f.From, f.Hex, dump(evs))
		}
		switch req, resp := evs[0].req, evs[0].resp; {
		case req != nil && req.Op == OpHello:
			offered = req.Hello.Flags
			if req.Hello.Nonce != cn {
				t.Fatalf("%s: client hello nonce %x", v.Name, req.Hello.Nonce)
			}
		case resp != nil && resp.Op == OpHello:
			if resp.Hello.Nonce != sn || (resp.Hello.Flags&FlagAuthRequired != 0) != (v.ClientSecret != "") {
				t.Fatalf("%s: server hello %+v", v.Name, resp.Hello)
			}
			serverDec.SetFlags(resp.Hello.Flags) // the server's echo is what it put in force
			revisions, err := AcceptFlags(offered, resp.Hello.Flags)
			if got := acceptVectorOf("", offered, resp.Hello.Flags); got.Error != v.ClientError || !reflect.DeepEqual(got.Revisions, v.Revisions) {
				t.Fatalf("%s: AcceptFlags = %#x, %v; the vector says %v, %q", v.Name, revisions, err, v.Revisions, v.ClientError)
			}
			if err != nil && i != len(v.Frames)-1 {
				t.Fatalf("%s: frames after a server hello the client refuses", v.Name)
			}
			clientDec.SetFlags(revisions)
		case req != nil && req.Op == OpProof:
			if req.Proof != cp {
				t.Fatalf("%s: client proof %x", v.Name, req.Proof)
			}
		case resp != nil && resp.Op == OpProof:
			if resp.Proof != sp {
				t.Fatalf("%s: server proof %x", v.Name, resp.Proof)
			}
		case req != nil:
			if req.Check() != "" {
				t.Fatalf("%s: request %d fails Check: %s", v.Name, i, req.Check())
			}
			pending[req.Owner] = req.Op
		default:
			if op, ok := pending[resp.Owner]; !ok || !Answers(op, resp.Op) {
				t.Fatalf("%s: %v for owner %d answers no pending request", v.Name, resp.Op, resp.Owner)
			}
			delete(pending, resp.Owner)
		}
	}
	if len(pending) != 0 {
		t.Fatalf("%s: requests left unanswered: %v", v.Name, pending)
	}
}

// TestVectorsRev2UpToDate regenerates rev2.json and compares it with docs/vectors; with
// -update it writes it instead.
func TestVectorsRev2UpToDate(t *testing.T) {
	b, err := json.MarshalIndent(genRev2(t), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join(vectorDir, "rev2.json")
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, b) {
		t.Errorf("%s is not what the test tables give (err %v): run go test ./wire -run TestVectors -update and review the diff", path, err)
	}
}

// TestVectorsRev2 checks the code against every vector of rev2.json: the negotiation both
// ways, every frame on the connection it names, and every handshake, whose proofs must also
// equal those of handshake.json for the same secret and nonces (the flags are in no proof).
func TestVectorsRev2(t *testing.T) {
	var f rev2File
	readVectors(t, "rev2.json", &f)
	if len(f.Echo) == 0 || len(f.Accept) == 0 || len(f.Requests) == 0 || len(f.Responses) == 0 || len(f.Handshakes) == 0 {
		t.Fatal("rev2.json lacks a section")
	}
	for _, v := range f.Echo {
		flags := EchoFlags(v.ClientFlags, v.Supported)
		server := flags
		if v.Auth {
			server |= FlagAuthRequired
		}
		if flags != v.Revisions || server != v.ServerFlags {
			t.Errorf("echo %q: EchoFlags gives %#x (hello %#x), the vector %#x (hello %#x)", v.Name, flags, server, v.Revisions, v.ServerFlags)
		}
	}
	for _, v := range f.Accept {
		if got := acceptVectorOf(v.Name, v.Offered, v.ServerFlags); !reflect.DeepEqual(got, v) {
			t.Errorf("accept: AcceptFlags gives\n%s\nwant\n%s", jsonOf(got), jsonOf(v))
		}
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
				switch v.Connection {
				case connRevised:
					d.SetFlags(FlagLeases)
				case connLatch1:
				default:
					t.Fatalf("connection %q, want %s or %s", v.Connection, connLatch1, connRevised)
				}
				evs := feed(t, d, in)
				if len(evs) != 1 {
					t.Fatalf("got %d events, want 1: %s", len(evs), dump(evs))
				}
				v := v
				v.Connection = "" // requestVector and responseVector do not know it
				checkVectorEvent(t, v, in, evs[0])
			})
		}
	}
	var v1 handshakeFile
	readVectors(t, "handshake.json", &v1)
	for _, v := range f.Handshakes {
		t.Run("handshake/"+v.Name, func(t *testing.T) {
			checkRevisedHandshake(t, v)
			if v.ClientSecret == "" {
				return
			}
			twin := false
			for _, w := range v1.Handshakes {
				if w.ClientSecret == v.ClientSecret && w.ClientNonce == v.ClientNonce && w.ServerNonce == v.ServerNonce {
					twin = true
					if w.ClientProof != v.ClientProof || w.ServerProof != v.ServerProof {
						t.Fatalf("proofs differ from handshake.json %q for the same secret and nonces", w.Name)
					}
				}
			}
			if !twin {
				t.Fatal("no handshake of handshake.json has this secret and these nonces to compare the proofs with")
			}
		})
	}
}
