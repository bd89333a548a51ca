package wire

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// Revision 2 (FlagLeases, docs/protocol.md): the frames of a revised connection,
// the same frames refused on a latch/1 one, the negotiation helpers and the answer rule. The
// latch/1 tables in decode_test.go stay as they are: a Decoder without flags must still give
// exactly their results.

// ext builds an extend request frame.
func ext(owner, token uint64, lease uint16, key string) []byte {
	return frame('L', u64(owner), u64(token), u16(lease), []byte(key))
}

// granted builds a G response frame.
func granted(owner, token uint64, age uint32) []byte {
	return frame('G', u64(owner), u64(token), []byte{byte(age >> 24), byte(age >> 16), byte(age >> 8), byte(age)})
}

// revised returns a decoder from newDec with FlagLeases in force.
func revised(newDec func() *Decoder) func() *Decoder {
	return func() *Decoder {
		d := newDec()
		d.SetFlags(FlagLeases)
		return d
	}
}

// leasesRequestCases are requests as a server decodes them on a connection with FlagLeases.
func leasesRequestCases() []requestCase {
	k := func(s string) []byte { return []byte(s) }
	key128, key129 := strings.Repeat("k", MaxKey), strings.Repeat("k", MaxKey+1)
	return []requestCase{
		{name: "extend", in: ext(7, 12345, 60, "orders/42"),
			want: &Request{Op: OpExtend, Owner: 7, Token: 12345, Lease: 60, Key: k("orders/42")}},
		{name: "extend header all LF", in: frame('L', lf8, lf8, fill('\n', 2), k("k")),
			want: &Request{Op: OpExtend, Owner: lfU64, Token: lfU64, Lease: 0x0A0A, Key: k("k")}},
		{name: "extend max valid frame (128-byte key, 148 bytes)", in: ext(1<<64-1, MaxToken, MaxLease, key128),
			want: &Request{Op: OpExtend, Owner: 1<<64 - 1, Token: MaxToken, Lease: MaxLease, Key: k(key128)}},
		{name: "extend min lease", in: ext(1, 2, MinLease, "a"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: MinLease, Key: k("a")}},
		{name: "extend token 0", in: ext(1, 0, 30, "a"),
			want: &Request{Op: OpExtend, Owner: 1, Lease: 30, Key: k("a")}},
		{name: "extend key with CR", in: ext(1, 2, 30, "a\r"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k("a\r")}},
		{name: "extend 64 cyrillic", in: ext(1, 2, 30, cyrillic64),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k(cyrillic64)}},
		{name: "extend 65 cyrillic", in: ext(1, 2, 30, cyrillic65),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k(cyrillic65)}, check: ReasonBadKey},
		{name: "extend 129-byte key", in: ext(1, 2, 30, key129),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k(key129)}, check: ReasonBadKey},
		{name: "extend empty key", in: ext(1, 2, 30, ""),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k("")}, check: ReasonBadKey},
		{name: "extend key with space", in: ext(1, 2, 30, "a b"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k("a b")}, check: ReasonBadKey},
		{name: "extend key with tab", in: ext(1, 2, 30, "a\tb"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k("a\tb")}, check: ReasonBadKey},
		{name: "extend key not UTF-8", in: ext(1, 2, 30, "a\xffb"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k("a\xffb")}, check: ReasonBadKey},
		{name: "extend lease 0", in: ext(1, 2, 0, "a"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Key: k("a")}, check: ReasonBadRange},
		{name: "extend lease 3601", in: ext(1, 2, MaxLease+1, "a"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: MaxLease + 1, Key: k("a")}, check: ReasonBadRange},
		{name: "extend lease 65535", in: ext(1, 2, 1<<16-1, "a"),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 1<<16 - 1, Key: k("a")}, check: ReasonBadRange},
		{name: "extend owner 0", in: ext(0, 2, 30, "a"),
			want: &Request{Op: OpExtend, Token: 2, Lease: 30, Key: k("a")}, check: ReasonBadOwner},
		{name: "extend owner 0, bad key, bad lease", in: ext(0, 2, 0, "a b"),
			want: &Request{Op: OpExtend, Token: 2, Key: k("a b")}, check: ReasonBadOwner},
		{name: "extend bad key, bad lease", in: ext(1, 2, 0, ""),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Key: k("")}, check: ReasonBadKey},
		{name: "extend 192-byte frame (172-byte key)", in: ext(1, 2, 30, strings.Repeat("k", 172)),
			want: &Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: k(strings.Repeat("k", 172))}, check: ReasonBadKey},
		{name: "extend 173-byte key is oversized", in: ext(1, 2, 30, strings.Repeat("k", 173)),
			err: ErrOversized, off: MaxFrame},
		{name: "extend without LF is oversized", in: append(noLF('L', u64(1), u64(2), u16(30)), fill('k', 500)...),
			err: ErrOversized, off: MaxFrame},
		{name: "extend header with LF bytes, key follows the 18 bytes", in: ext(0x0A, 0x0A, 0x0A, "k"),
			want: &Request{Op: OpExtend, Owner: 0x0A, Token: 0x0A, Lease: 0x0A, Key: k("k")}},

		{name: "acquire, as on latch/1", in: acq(7, 3, 30, "orders/42"),
			want: &Request{Op: OpAcquire, Owner: 7, Wait: 3, Lease: 30, Key: k("orders/42")}},
		{name: "release, as on latch/1", in: rel(9, 12345, "orders/42"),
			want: &Request{Op: OpRelease, Owner: 9, Token: 12345, Key: k("orders/42")}},
		{name: "ping, as on latch/1", in: frame('P', u64(42)), want: &Request{Op: OpPing, Owner: 42}},
		{name: "hello offering FlagLeases", in: frame('H', []byte{Version, FlagLeases}, fill(7, NonceSize)),
			want: &Request{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagLeases, Nonce: nonce(7)}}},
		{name: "proof, as on latch/1", in: frame('V', fill(0xAB, ProofSize)), want: &Request{Op: OpProof, Proof: proofOf(0xAB)}},

		{name: "response-only op G", in: granted(1, 2, 3), err: ErrUnknownOp, off: 1},
		{name: "unknown op", in: []byte("X\n"), err: ErrUnknownOp, off: 1},
		{name: "lowercase extend", in: frame('l', u64(1), u64(2), u16(30), k("k")), err: ErrUnknownOp, off: 1},
		{name: "extend with a ping's header is cut short", in: frame('L', u64(1))},

		{name: "cut short in extend header", in: noLF('L', u64(1), u64(2), []byte{0})},
		{name: "cut short in extend key", in: noLF('L', u64(1), u64(2), u16(30), k("abc"))},
	}
}

// leasesV1RequestCases are the frames of revision 2 as a server decodes them on a latch/1
// connection: every new op is unknown at its first byte, exactly as before the revision
// existed; a hello that offers FlagLeases is a hello like any other.
func leasesV1RequestCases() []requestCase {
	return []requestCase{
		{name: "extend on a latch/1 connection is an unknown op", in: ext(7, 12345, 60, "orders/42"), err: ErrUnknownOp, off: 1},
		{name: "extend header all LF on a latch/1 connection", in: frame('L', lf8, lf8, fill('\n', 2), []byte("k")), err: ErrUnknownOp, off: 1},
		{name: "response-only op G on a latch/1 connection", in: granted(1, 2, 3), err: ErrUnknownOp, off: 1},
		{name: "hello offering FlagLeases to a latch/1 server", in: frame('H', []byte{Version, FlagLeases}, fill(7, NonceSize)),
			want: &Request{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagLeases, Nonce: nonce(7)}}},
	}
}

// leasesResponseCases are responses as a client decodes them on a connection with FlagLeases.
func leasesResponseCases() []responseCase {
	return []responseCase{
		{name: "granted", in: granted(5, 77, 1500), want: &Response{Op: OpGranted, Owner: 5, Token: 77, Age: 1500}},
		{name: "granted age 0", in: granted(5, 77, 0), want: &Response{Op: OpGranted, Owner: 5, Token: 77}},
		{name: "granted after a 255 s wait", in: granted(5, 77, 255000), want: &Response{Op: OpGranted, Owner: 5, Token: 77, Age: 255000}},
		{name: "granted max token, max age", in: granted(5, MaxToken, MaxAge), want: &Response{Op: OpGranted, Owner: 5, Token: MaxToken, Age: MaxAge}},
		{name: "granted header all LF", in: frame('G', lf8, lf8, fill('\n', 4)),
			want: &Response{Op: OpGranted, Owner: lfU64, Token: lfU64, Age: 0x0A0A0A0A}},
		{name: "extended", in: frame('L', u64(5)), want: &Response{Op: OpExtend, Owner: 5}},
		{name: "extended owner all LF", in: frame('L', lf8), want: &Response{Op: OpExtend, Owner: lfU64}},
		{name: "not held, the answer to an extend", in: frame('N', u64(5)), want: &Response{Op: OpNotHeld, Owner: 5}},
		{name: "error unsupported", in: frame('E', u64(5), []byte("unsupported")),
			want: &Response{Op: OpError, Owner: 5, Reason: ReasonUnsupported}},
		{name: "timed out, as on latch/1", in: frame('T', u64(5)), want: &Response{Op: OpTimeout, Owner: 5}},
		{name: "busy, as on latch/1", in: frame('B', u64(5)), want: &Response{Op: OpBusy, Owner: 5}},
		{name: "released, as on latch/1", in: frame('R', u64(5)), want: &Response{Op: OpRelease, Owner: 5}},
		{name: "pong, as on latch/1", in: frame('P', u64(5)), want: &Response{Op: OpPing, Owner: 5}},
		{name: "hello echoing FlagLeases", in: frame('H', []byte{Version, FlagLeases}, fill(9, NonceSize)),
			want: &Response{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagLeases, Nonce: nonce(9)}}},
		{name: "hello echoing FlagLeases, auth", in: frame('H', []byte{Version, FlagAuthRequired | FlagLeases}, fill(9, NonceSize)),
			want: &Response{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagAuthRequired | FlagLeases, Nonce: nonce(9)}}},
		{name: "proof, as on latch/1", in: frame('V', fill(0xCD, 32)), want: &Response{Op: OpProof, Proof: proofOf(0xCD)}},

		{name: "acquired (A) is no op on a revised connection", in: frame('A', u64(5), u64(77)), err: ErrUnknownOp, off: 1},
		{name: "granted with tail", in: append(noLF('G', u64(1), u64(2), fill(0, 4)), "k\n"...), err: ErrUnexpectedTail, off: 22},
		{name: "granted with a 16-byte header is cut short", in: frame('G', u64(1), u64(2))},
		{name: "extended with tail", in: append(noLF('L', u64(1)), "k\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "extended with CR before LF", in: append(noLF('L', u64(1)), "\r\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "lowercase granted", in: frame('g', u64(1), u64(2), fill(0, 4)), err: ErrUnknownOp, off: 1},
		{name: "unknown op", in: frame('X', u64(1)), err: ErrUnknownOp, off: 1},

		{name: "cut short in granted header", in: noLF('G', u64(1), u64(2), []byte{0, 0})},
		{name: "cut short before LF of extended", in: noLF('L', u64(1))},
	}
}

// leasesV1ResponseCases are the responses of revision 2 as a client decodes them on a latch/1
// connection: unknown ops at their first byte.
func leasesV1ResponseCases() []responseCase {
	return []responseCase{
		{name: "granted on a latch/1 connection is an unknown op", in: granted(5, 77, 1500), err: ErrUnknownOp, off: 1},
		{name: "extended on a latch/1 connection is an unknown op", in: frame('L', u64(5)), err: ErrUnknownOp, off: 1},
		{name: "acquired, as ever on latch/1", in: frame('A', u64(5), u64(77)), want: &Response{Op: OpAcquire, Owner: 5, Token: 77}},
	}
}

func TestDecodeLeasesRequest(t *testing.T) {
	for _, set := range []struct {
		name   string
		newDec func() *Decoder
		cases  []requestCase
	}{
		{"revised", revised(NewRequestDecoder), leasesRequestCases()},
		{"latch1", NewRequestDecoder, leasesV1RequestCases()},
	} {
		for _, tc := range set.cases {
			t.Run(set.name+"/"+tc.name, func(t *testing.T) {
				ev := decodeCase(t, set.newDec, tc.in, tc.err, tc.off, tc.want != nil)
				if ev == nil {
					return
				}
				if ev.req == nil || !reflect.DeepEqual(ev.req, tc.want) {
					t.Fatalf("decoded %s, want %+v", dump([]event{*ev}), *tc.want)
				}
				if got := ev.req.Check(); got != tc.check {
					t.Fatalf("Check() = %q, want %q", got, tc.check)
				}
				if got := AppendRequest(nil, ev.req); !bytes.Equal(got, tc.in) {
					t.Fatalf("re-encodes as %x, want %x", got, tc.in)
				}
			})
		}
	}
}

func TestDecodeLeasesResponse(t *testing.T) {
	for _, set := range []struct {
		name   string
		newDec func() *Decoder
		cases  []responseCase
	}{
		{"revised", revised(NewResponseDecoder), leasesResponseCases()},
		{"latch1", NewResponseDecoder, leasesV1ResponseCases()},
	} {
		for _, tc := range set.cases {
			t.Run(set.name+"/"+tc.name, func(t *testing.T) {
				ev := decodeCase(t, set.newDec, tc.in, tc.err, tc.off, tc.want != nil)
				if ev == nil {
					return
				}
				if ev.resp == nil || *ev.resp != *tc.want {
					t.Fatalf("decoded %s, want %+v", dump([]event{*ev}), *tc.want)
				}
				if got := AppendResponse(nil, ev.resp); !bytes.Equal(got, tc.in) {
					t.Fatalf("re-encodes as %x, want %x", got, tc.in)
				}
			})
		}
	}
}

// TestLeasesLatch1TablesUnchanged runs latch/1's own case tables through a decoder that had
// FlagLeases and then SetFlags(0): it must be latch/1 again, result for result.
func TestLeasesLatch1TablesUnchanged(t *testing.T) {
	back := func(newDec func() *Decoder) func() *Decoder {
		return func() *Decoder {
			d := newDec()
			d.SetFlags(FlagLeases)
			d.SetFlags(0)
			return d
		}
	}
	for _, tc := range requestCases() {
		if ev := decodeCase(t, back(NewRequestDecoder), tc.in, tc.err, tc.off, tc.want != nil); ev != nil && !reflect.DeepEqual(ev.req, tc.want) {
			t.Fatalf("request %s: decoded %+v, want %+v", tc.name, ev.req, tc.want)
		}
	}
	for _, tc := range responseCases() {
		if ev := decodeCase(t, back(NewResponseDecoder), tc.in, tc.err, tc.off, tc.want != nil); ev != nil && *ev.resp != *tc.want {
			t.Fatalf("response %s: decoded %+v, want %+v", tc.name, ev.resp, tc.want)
		}
	}
}

// TestDecodeLeasesPipelined decodes every good frame of a revised connection laid end to end.
func TestDecodeLeasesPipelined(t *testing.T) {
	var reqs, resps [][]byte
	for _, tc := range leasesRequestCases() {
		if tc.want != nil {
			reqs = append(reqs, tc.in)
		}
	}
	for _, tc := range leasesResponseCases() {
		if tc.want != nil {
			resps = append(resps, tc.in)
		}
	}
	decodePipelined(t, revised(NewRequestDecoder), reqs, func(d *Decoder) []byte { return AppendRequest(nil, d.Request()) })
	decodePipelined(t, revised(NewResponseDecoder), resps, func(d *Decoder) []byte { return AppendResponse(nil, d.Response()) })
}

// TestSetFlagsBetweenFrames plays a server's read of one buffer holding a hello that offers
// FlagLeases and an extend: the hello decodes on the latch/1 table, the server turns the
// revision on from its echo, and the extend that follows in the same buffer decodes.
func TestSetFlagsBetweenFrames(t *testing.T) {
	hello := frame('H', []byte{Version, FlagLeases | 0x80}, fill(1, NonceSize))
	extend := ext(3, 4, 30, "k")
	for _, supported := range []uint8{0, FlagLeases} {
		d := NewRequestDecoder()
		in := append(bytes.Clone(hello), extend...)
		n, done, err := d.Decode(in)
		if n != len(hello) || !done || err != nil {
			t.Fatalf("hello: Decode = %d, %v, %v", n, done, err)
		}
		d.SetFlags(EchoFlags(d.Request().Hello.Flags, supported))
		if d.Flags() != supported {
			t.Fatalf("flags %#x after the echo, want %#x", d.Flags(), supported)
		}
		n, done, err = d.Decode(in[n:])
		switch {
		case supported == 0 && !isFrameError(err, ErrUnknownOp, 1):
			t.Fatalf("latch/1 server: extend gives %d, %v, %v; want unknown op at byte 1", n, done, err)
		case supported != 0 && (err != nil || !done || d.Request().Op != OpExtend):
			t.Fatalf("revised server: extend gives %d, %v, %v", n, done, err)
		}
	}
}

func TestSetFlagsKeepsOnlyOffers(t *testing.T) {
	d := NewResponseDecoder()
	d.SetFlags(0xFF)
	if d.Flags() != OfferFlags {
		t.Fatalf("Flags() = %#x, want %#x", d.Flags(), OfferFlags)
	}
	d.Decode([]byte("Z"))
	d.Reset()
	if d.Flags() != OfferFlags || d.Partial() {
		t.Fatalf("after Reset: flags %#x, partial %v", d.Flags(), d.Partial())
	}
	if _, done, err := d.Decode(granted(1, 2, 3)); !done || err != nil || d.Response().Op != OpGranted {
		t.Fatalf("G after Reset: %v, %v", done, err)
	}
	var z Decoder
	if z.Flags() != 0 {
		t.Fatal("the zero Decoder has flags")
	}
}

// TestAnswersLeases pins the whole answer rule, revision 2 included: every pair of ops not
// listed answers nothing.
func TestAnswersLeases(t *testing.T) {
	want := map[[2]Op]bool{
		{OpAcquire, OpAcquire}: true, {OpAcquire, OpGranted}: true, {OpAcquire, OpTimeout}: true,
		{OpAcquire, OpBusy}: true, {OpAcquire, OpError}: true,
		{OpRelease, OpRelease}: true, {OpRelease, OpNotHeld}: true, {OpRelease, OpError}: true,
		{OpExtend, OpExtend}: true, {OpExtend, OpNotHeld}: true, {OpExtend, OpError}: true,
		{OpPing, OpPing}: true, {OpPing, OpError}: true,
	}
	for req := range 256 {
		for resp := range 256 {
			pair := [2]Op{Op(req), Op(resp)}
			if got := Answers(pair[0], pair[1]); got != want[pair] {
				t.Errorf("Answers(%v, %v) = %v, want %v", pair[0], pair[1], got, want[pair])
			}
		}
	}
}

func TestCheckExtend(t *testing.T) {
	good, bad := []byte("k"), []byte("a b")
	for _, tc := range []struct {
		name string
		r    Request
		want Reason
	}{
		{"ok", Request{Op: OpExtend, Owner: 1, Token: 2, Lease: 30, Key: good}, ""},
		{"token 0 is the server's N, not a check", Request{Op: OpExtend, Owner: 1, Lease: 30, Key: good}, ""},
		{"wait is ignored", Request{Op: OpExtend, Owner: 1, Wait: 9, Lease: 1, Key: good}, ""},
		{"lease 3600", Request{Op: OpExtend, Owner: 1, Lease: MaxLease, Key: good}, ""},
		{"lease 0", Request{Op: OpExtend, Owner: 1, Key: good}, ReasonBadRange},
		{"lease 3601", Request{Op: OpExtend, Owner: 1, Lease: MaxLease + 1, Key: good}, ReasonBadRange},
		{"bad key + bad lease", Request{Op: OpExtend, Owner: 1, Key: bad}, ReasonBadKey},
		{"no key", Request{Op: OpExtend, Owner: 1, Lease: 30}, ReasonBadKey},
		{"owner 0 + bad key + bad lease", Request{Op: OpExtend, Key: bad}, ReasonBadOwner},
		{"G is no request", Request{Op: OpGranted, Owner: 1}, ReasonBadRequest},
	} {
		if got := tc.r.Check(); got != tc.want {
			t.Errorf("%s: Check() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAppendLeases(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"extend", AppendRequest(nil, &Request{Op: OpExtend, Owner: 7, Token: 12345, Lease: 60, Key: []byte("orders/42")}),
			ext(7, 12345, 60, "orders/42")},
		{"extend ignores wait and proof", AppendRequest(nil, &Request{Op: OpExtend, Owner: 1, Wait: 5, Token: 2, Lease: 3, Key: []byte("k"), Proof: proofOf(1)}),
			ext(1, 2, 3, "k")},
		{"granted", AppendResponse(nil, &Response{Op: OpGranted, Owner: 5, Token: MaxToken, Age: 0x01020304}),
			frame('G', u64(5), u64(MaxToken), []byte{1, 2, 3, 4})},
		{"acquired ignores age", AppendResponse(nil, &Response{Op: OpAcquire, Owner: 5, Token: 77, Age: 9}),
			frame('A', u64(5), u64(77))},
		{"extended", AppendResponse(nil, &Response{Op: OpExtend, Owner: 5, Token: 77, Age: 9}), frame('L', u64(5))},
		{"unsupported", AppendResponse(nil, &Response{Op: OpError, Owner: 5, Reason: ReasonUnsupported}),
			frame('E', u64(5), []byte("unsupported"))},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: %x, want %x", tc.name, tc.got, tc.want)
		}
	}
	defer func() {
		if r, _ := recover().(string); !strings.Contains(r, "not a request op") {
			t.Fatalf("AppendRequest(G) recovered %q, want a panic", r)
		}
	}()
	AppendRequest(nil, &Request{Op: OpGranted})
}

// TestMaxFrameFitsLeases: the longest valid frame of a revised connection, L with a 128-byte
// key, is 148 bytes and fits MaxFrame; the longest response is still an E.
func TestMaxFrameFitsLeases(t *testing.T) {
	long := []byte(strings.Repeat("k", MaxKey))
	if n := len(AppendRequest(nil, &Request{Op: OpExtend, Key: long})); n != maxValidFrameLeases || n > MaxFrame {
		t.Fatalf("largest revised request is %d bytes, want %d", n, maxValidFrameLeases)
	}
	if maxValidFrameLeases != 148 {
		t.Fatalf("maxValidFrameLeases = %d, the draft says 148", maxValidFrameLeases)
	}
	if n := len(AppendResponse(nil, &Response{Op: OpGranted})); n != 22 {
		t.Fatalf("G is %d bytes, want 22", n)
	}
}

func TestLeasesOpsAndReason(t *testing.T) {
	if OpGranted.String() != "G" || OpExtend.String() != "L" {
		t.Fatalf("String: %q %q", OpGranted, OpExtend)
	}
	if ReasonUnsupported.Closes() || !validReason([]byte(ReasonUnsupported)) {
		t.Fatal("unsupported closes or is not a valid reason")
	}
	if r, ok := knownReason([]byte("unsupported")); !ok || r != ReasonUnsupported {
		t.Fatalf("knownReason(unsupported) = %q, %v", r, ok)
	}
	for _, r := range Reasons {
		if r == ReasonUnsupported {
			t.Fatal("Reasons (latch/1's section 5 table) lists unsupported")
		}
	}
}

// TestLeasesLayouts: the revised tables are latch/1's with exactly the ops of revision 2
// changed.
func TestLeasesLayouts(t *testing.T) {
	req := map[Op]layout{OpExtend: {18, tailKey}}
	resp := map[Op]layout{OpAcquire: {}, OpGranted: {20, tailNone}, OpExtend: {8, tailNone}}
	for b := range 256 {
		op := Op(b)
		want, ok := req[op]
		if !ok {
			want = requestLayouts[b]
		}
		if leasesRequestLayouts[b] != want {
			t.Errorf("revised request %v: %+v, want %+v", op, leasesRequestLayouts[b], want)
		}
		if want, ok = resp[op]; !ok {
			want = responseLayouts[b]
		}
		if leasesResponseLayouts[b] != want {
			t.Errorf("revised response %v: %+v, want %+v", op, leasesResponseLayouts[b], want)
		}
	}
}
