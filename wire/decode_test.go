package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var (
	cyrillic64 = strings.Repeat("я", 64) // 128 bytes
	cyrillic65 = strings.Repeat("я", 65) // 130 bytes
	korean42   = strings.Repeat("한", 42) // 126 bytes
	korean43   = strings.Repeat("한", 43) // 129 bytes
	lf8        = fill('\n', 8)           // a u64 of 0x0A0A0A0A0A0A0A0A
)

const lfU64 = 0x0A0A0A0A0A0A0A0A

// acq builds an acquire request frame.
func acq(owner uint64, wait uint8, lease uint16, key string) []byte {
	return frame('A', u64(owner), []byte{wait}, u16(lease), []byte(key))
}

// rel builds a release request frame.
func rel(owner, token uint64, key string) []byte {
	return frame('R', u64(owner), u64(token), []byte(key))
}

type requestCase struct {
	name  string
	in    []byte
	want  *Request // the decoded frame; nil when err is set or the input is cut short
	check Reason   // want.Check()
	err   error    // structural error, found at byte off of the frame
	off   int
}

func requestCases() []requestCase {
	k := func(s string) []byte { return []byte(s) }
	return []requestCase{
		{name: "acquire", in: acq(7, 3, 30, "orders/42"),
			want: &Request{Op: OpAcquire, Owner: 7, Wait: 3, Lease: 30, Key: k("orders/42")}},
		{name: "acquire header all LF", in: frame('A', lf8, []byte{'\n'}, []byte{'\n', '\n'}, k("k")),
			want: &Request{Op: OpAcquire, Owner: lfU64, Wait: 10, Lease: 0x0A0A, Key: k("k")}},
		{name: "acquire header ends in LF, key follows", in: acq(1, 0, 0x0A0A, "\u00e9"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 0x0A0A, Key: k("\u00e9")}},
		{name: "acquire max wait and lease", in: acq(1<<64-1, 255, MaxLease, "a"),
			want: &Request{Op: OpAcquire, Owner: 1<<64 - 1, Wait: 255, Lease: MaxLease, Key: k("a")}},
		{name: "acquire min lease", in: acq(1, 0, MinLease, "a"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: MinLease, Key: k("a")}},
		{name: "acquire key with CR", in: acq(1, 0, 30, "a\rb\r"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("a\rb\r")}},
		{name: "acquire 64 cyrillic", in: acq(1, 0, 30, cyrillic64),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k(cyrillic64)}},
		{name: "acquire 65 cyrillic", in: acq(1, 0, 30, cyrillic65),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k(cyrillic65)}, check: ReasonBadKey},
		{name: "acquire 42 korean", in: acq(1, 0, 30, korean42),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k(korean42)}},
		{name: "acquire 43 korean", in: acq(1, 0, 30, korean43),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k(korean43)}, check: ReasonBadKey},
		{name: "acquire empty key", in: acq(1, 0, 30, ""),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("")}, check: ReasonBadKey},
		{name: "acquire key with space", in: acq(1, 0, 30, "a b"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("a b")}, check: ReasonBadKey},
		{name: "acquire key with tab", in: acq(1, 0, 30, "a\tb"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("a\tb")}, check: ReasonBadKey},
		{name: "acquire key with VT", in: acq(1, 0, 30, "a\vb"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("a\vb")}, check: ReasonBadKey},
		{name: "acquire key with FF", in: acq(1, 0, 30, "\f"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("\f")}, check: ReasonBadKey},
		{name: "acquire key not UTF-8", in: acq(1, 0, 30, "a\xffb"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("a\xffb")}, check: ReasonBadKey},
		{name: "acquire key truncated UTF-8", in: acq(1, 0, 30, "я"[:1]),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k("я"[:1])}, check: ReasonBadKey},
		{name: "acquire 192-byte frame (179-byte key)", in: acq(1, 0, 30, strings.Repeat("k", 179)),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: 30, Key: k(strings.Repeat("k", 179))}, check: ReasonBadKey},
		{name: "acquire lease 0", in: acq(1, 0, 0, "a"),
			want: &Request{Op: OpAcquire, Owner: 1, Key: k("a")}, check: ReasonBadRange},
		{name: "acquire lease 3601", in: acq(1, 0, MaxLease+1, "a"),
			want: &Request{Op: OpAcquire, Owner: 1, Lease: MaxLease + 1, Key: k("a")}, check: ReasonBadRange},
		{name: "acquire owner 0", in: acq(0, 0, 30, "a"),
			want: &Request{Op: OpAcquire, Lease: 30, Key: k("a")}, check: ReasonBadOwner},
		{name: "acquire owner 0, bad key, bad lease", in: acq(0, 0, 0, "a b"),
			want: &Request{Op: OpAcquire, Key: k("a b")}, check: ReasonBadOwner},
		{name: "acquire bad key, bad lease", in: acq(1, 0, 0, ""),
			want: &Request{Op: OpAcquire, Owner: 1, Key: k("")}, check: ReasonBadKey},
		{name: "acquire 180-byte key is oversized", in: acq(1, 0, 30, strings.Repeat("k", 180)),
			err: ErrOversized, off: MaxFrame},
		{name: "acquire without LF is oversized", in: append(noLF('A', u64(1), []byte{0}, u16(30)), fill('k', 500)...),
			err: ErrOversized, off: MaxFrame},

		{name: "release", in: rel(9, 12345, "orders/42"),
			want: &Request{Op: OpRelease, Owner: 9, Token: 12345, Key: k("orders/42")}},
		{name: "release header all LF", in: frame('R', lf8, lf8, k("k")),
			want: &Request{Op: OpRelease, Owner: lfU64, Token: lfU64, Key: k("k")}},
		{name: "release token 0", in: rel(9, 0, "k"),
			want: &Request{Op: OpRelease, Owner: 9, Key: k("k")}},
		{name: "release max valid frame (128-byte key)", in: rel(9, MaxToken, strings.Repeat("k", MaxKey)),
			want: &Request{Op: OpRelease, Owner: 9, Token: MaxToken, Key: k(strings.Repeat("k", MaxKey))}},
		{name: "release 129-byte key", in: rel(9, 1, strings.Repeat("k", MaxKey+1)),
			want: &Request{Op: OpRelease, Owner: 9, Token: 1, Key: k(strings.Repeat("k", MaxKey+1))}, check: ReasonBadKey},
		{name: "release 192-byte frame (174-byte key)", in: rel(9, 1, strings.Repeat("k", 174)),
			want: &Request{Op: OpRelease, Owner: 9, Token: 1, Key: k(strings.Repeat("k", 174))}, check: ReasonBadKey},
		{name: "release 175-byte key is oversized", in: rel(9, 1, strings.Repeat("k", 175)),
			err: ErrOversized, off: MaxFrame},
		{name: "release owner 0 and empty key", in: rel(0, 1, ""),
			want: &Request{Op: OpRelease, Token: 1, Key: k("")}, check: ReasonBadOwner},
		{name: "release empty key", in: rel(1, 1, ""),
			want: &Request{Op: OpRelease, Owner: 1, Token: 1, Key: k("")}, check: ReasonBadKey},

		{name: "ping", in: frame('P', u64(42)), want: &Request{Op: OpPing, Owner: 42}},
		{name: "ping owner ends in LF", in: frame('P', u64(0x0A)), want: &Request{Op: OpPing, Owner: 0x0A}},
		{name: "ping owner all LF", in: frame('P', lf8), want: &Request{Op: OpPing, Owner: lfU64}},
		{name: "ping owner 0", in: frame('P', u64(0)), want: &Request{Op: OpPing}, check: ReasonBadOwner},
		{name: "ping with tail", in: append(noLF('P', u64(1)), "x\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "ping with CR before LF", in: append(noLF('P', u64(1)), "\r\n"...), err: ErrUnexpectedTail, off: 10},

		{name: "hello", in: frame('H', []byte{Version, 0}, fill(7, NonceSize)),
			want: &Request{Op: OpHello, Hello: Hello{Version: Version, Nonce: nonce(7)}}},
		{name: "hello all LF", in: frame('H', fill('\n', 2+NonceSize)),
			want: &Request{Op: OpHello, Hello: Hello{Version: 10, Flags: 10, Nonce: nonce('\n')}}},
		{name: "hello with tail", in: append(noLF('H', fill(1, 34)), "xx\n"...), err: ErrUnexpectedTail, off: 36},

		{name: "proof", in: frame('V', fill(0xAB, ProofSize)), want: &Request{Op: OpProof, Proof: proofOf(0xAB)}},
		{name: "proof all LF", in: frame('V', fill('\n', ProofSize)), want: &Request{Op: OpProof, Proof: proofOf('\n')}},
		{name: "proof with tail", in: append(noLF('V', fill(1, 32)), 0, '\n'), err: ErrUnexpectedTail, off: 34},

		{name: "unknown op", in: []byte("X\n"), err: ErrUnknownOp, off: 1},
		{name: "lowercase op", in: []byte("a\n"), err: ErrUnknownOp, off: 1},
		{name: "empty line", in: []byte("\n"), err: ErrUnknownOp, off: 1},
		{name: "response-only op T", in: frame('T', u64(1)), err: ErrUnknownOp, off: 1},
		{name: "response-only op B", in: frame('B', u64(1)), err: ErrUnknownOp, off: 1},
		{name: "response-only op N", in: frame('N', u64(1)), err: ErrUnknownOp, off: 1},
		{name: "response-only op E", in: frame('E', u64(1), k("internal")), err: ErrUnknownOp, off: 1},

		{name: "cut short after op", in: []byte("A")},
		{name: "cut short in header", in: noLF('R', u64(1))},
		{name: "cut short in key", in: noLF('A', u64(1), []byte{0}, u16(1), k("abc"))},
	}
}

func TestDecodeRequest(t *testing.T) {
	for _, tc := range requestCases() {
		t.Run(tc.name, func(t *testing.T) {
			ev := decodeCase(t, NewRequestDecoder, tc.in, tc.err, tc.off, tc.want != nil)
			if ev == nil {
				return
			}
			if ev.req == nil {
				t.Fatalf("want a request frame, got %+v", *ev)
			}
			if !reflect.DeepEqual(ev.req, tc.want) {
				t.Fatalf("decoded %+v\nwant    %+v", *ev.req, *tc.want)
			}
			if got := ev.req.Check(); got != tc.check {
				t.Fatalf("Check() = %q, want %q", got, tc.check)
			}
		})
	}
}

// decodeCase runs one table case through a decoder from newDec: the input must give one
// event, which is the structural error wantErr at byte off, a partial frame when the case
// has neither an error nor a frame, or else one whole frame of all the input. Every way of
// cutting the input must give the same events. It returns the event when it is a whole
// frame, for the caller to check what was decoded, and nil otherwise.
func decodeCase(t *testing.T, newDec func() *Decoder, in []byte, wantErr error, off int, frame bool) *event {
	t.Helper()
	whole := feed(t, newDec(), in)
	if len(whole) != 1 {
		t.Fatalf("got %d events, want 1: %s", len(whole), dump(whole))
	}
	for name, chunks := range splits(in) {
		sameEvents(t, name, feed(t, newDec(), chunks...), whole)
	}
	ev := whole[0]
	switch {
	case wantErr != nil:
		if !isFrameError(ev.err, wantErr, off) {
			t.Fatalf("err = %v, want %v at byte %d", ev.err, wantErr, off)
		}
		if len(ev.raw) != off {
			t.Fatalf("consumed %d bytes of the frame before the error, want %d", len(ev.raw), off)
		}
		return nil
	case !frame:
		if !ev.partial || !bytes.Equal(ev.raw, in) {
			t.Fatalf("want a partial frame of %d bytes, got %s", len(in), dump(whole))
		}
		return nil
	}
	if ev.err != nil || ev.partial || !bytes.Equal(ev.raw, in) {
		t.Fatalf("want one frame of %d bytes, got %s", len(in), dump(whole))
	}
	return &ev
}

type responseCase struct {
	name string
	in   []byte
	want *Response
	err  error
	off  int
}

func responseCases() []responseCase {
	cs := []responseCase{
		{name: "acquired", in: frame('A', u64(5), u64(77)), want: &Response{Op: OpAcquire, Owner: 5, Token: 77}},
		{name: "acquired max token", in: frame('A', u64(5), u64(MaxToken)), want: &Response{Op: OpAcquire, Owner: 5, Token: MaxToken}},
		{name: "acquired header all LF", in: frame('A', lf8, lf8), want: &Response{Op: OpAcquire, Owner: lfU64, Token: lfU64}},
		{name: "timed out", in: frame('T', u64(5)), want: &Response{Op: OpTimeout, Owner: 5}},
		{name: "busy", in: frame('B', u64(5)), want: &Response{Op: OpBusy, Owner: 5}},
		{name: "released", in: frame('R', u64(5)), want: &Response{Op: OpRelease, Owner: 5}},
		{name: "not held", in: frame('N', u64(5)), want: &Response{Op: OpNotHeld, Owner: 5}},
		{name: "pong", in: frame('P', u64(5)), want: &Response{Op: OpPing, Owner: 5}},
		{name: "pong owner all LF", in: frame('P', lf8), want: &Response{Op: OpPing, Owner: lfU64}},
		{name: "not held owner ends in LF", in: frame('N', u64(0x0A)), want: &Response{Op: OpNotHeld, Owner: 0x0A}},
		{name: "error owner all LF", in: frame('E', lf8, []byte("bad_key")),
			want: &Response{Op: OpError, Owner: lfU64, Reason: ReasonBadKey}},
		{name: "error unknown reason", in: frame('E', u64(3), []byte("some_future_reason")),
			want: &Response{Op: OpError, Owner: 3, Reason: "some_future_reason"}},
		{name: "error 32-byte reason", in: frame('E', u64(3), fill('z', MaxReasonLen)),
			want: &Response{Op: OpError, Owner: 3, Reason: Reason(fill('z', MaxReasonLen))}},
		{name: "error reason _", in: frame('E', u64(3), []byte("_")), want: &Response{Op: OpError, Owner: 3, Reason: "_"}},
		{name: "hello auth", in: frame('H', []byte{Version, FlagAuthRequired}, fill(9, NonceSize)),
			want: &Response{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagAuthRequired, Nonce: nonce(9)}}},
		{name: "hello all LF", in: frame('H', fill('\n', 34)),
			want: &Response{Op: OpHello, Hello: Hello{Version: 10, Flags: 10, Nonce: nonce('\n')}}},
		{name: "proof", in: frame('V', fill(0xCD, 32)), want: &Response{Op: OpProof, Proof: proofOf(0xCD)}},
		{name: "proof all LF", in: frame('V', fill('\n', 32)), want: &Response{Op: OpProof, Proof: proofOf('\n')}},

		{name: "unknown op", in: frame('X', u64(1)), err: ErrUnknownOp, off: 1},
		{name: "lowercase op", in: frame('e', u64(1)), err: ErrUnknownOp, off: 1},
		{name: "empty line", in: []byte("\n"), err: ErrUnknownOp, off: 1},
		{name: "acquired with tail", in: append(noLF('A', u64(1), u64(2)), "k\n"...), err: ErrUnexpectedTail, off: 18},
		{name: "timed out with tail", in: append(noLF('T', u64(1)), "k\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "busy with tail", in: append(noLF('B', u64(1)), "k\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "released with tail", in: append(noLF('R', u64(1)), "k\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "not held with tail", in: append(noLF('N', u64(1)), "k\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "pong with tail", in: append(noLF('P', u64(1)), "k\n"...), err: ErrUnexpectedTail, off: 10},
		{name: "hello with tail", in: append(noLF('H', fill(1, 34)), "k\n"...), err: ErrUnexpectedTail, off: 36},
		{name: "proof with tail", in: append(noLF('V', fill(1, 32)), "k\n"...), err: ErrUnexpectedTail, off: 34},
		{name: "error empty reason", in: frame('E', u64(1)), err: ErrBadReason, off: 10},
		{name: "error uppercase reason", in: frame('E', u64(1), []byte("Bad_key")), err: ErrBadReason, off: 10},
		{name: "error reason with space", in: frame('E', u64(1), []byte("bad key")), err: ErrBadReason, off: 13},
		{name: "error reason with digit", in: frame('E', u64(1), []byte("x1")), err: ErrBadReason, off: 11},
		{name: "error reason with CR", in: frame('E', u64(1), []byte("internal\r")), err: ErrBadReason, off: 18},
		{name: "error reason not ASCII", in: frame('E', u64(1), []byte("é")), err: ErrBadReason, off: 10},
		{name: "error 33-byte reason", in: frame('E', u64(1), fill('z', 33)), err: ErrBadReason, off: 42},
		{name: "error reason without LF", in: append(noLF('E', u64(1)), fill('z', 300)...), err: ErrBadReason, off: 42},

		{name: "cut short in header", in: noLF('A', u64(1), u64(2))[:12]},
		{name: "cut short before LF", in: noLF('T', u64(1))},
		{name: "cut short in reason", in: noLF('E', u64(1), []byte("intern"))},
	}
	for _, r := range Reasons {
		cs = append(cs, responseCase{name: "error " + string(r), in: frame('E', u64(11), []byte(r)),
			want: &Response{Op: OpError, Owner: 11, Reason: r}})
	}
	return cs
}

func TestDecodeResponse(t *testing.T) {
	for _, tc := range responseCases() {
		t.Run(tc.name, func(t *testing.T) {
			ev := decodeCase(t, NewResponseDecoder, tc.in, tc.err, tc.off, tc.want != nil)
			if ev == nil {
				return
			}
			if ev.resp == nil {
				t.Fatalf("want a response frame, got %+v", *ev)
			}
			if *ev.resp != *tc.want {
				t.Fatalf("decoded %+v\nwant    %+v", *ev.resp, *tc.want)
			}
		})
	}
}

// TestDecodePipelined puts every valid frame of the tables into one buffer:
// each Decode call must consume exactly one frame, and every way of cutting
// the buffer must give the same frames.
func TestDecodePipelined(t *testing.T) {
	t.Run("requests", func(t *testing.T) {
		var frames [][]byte
		for _, tc := range requestCases() {
			if tc.want != nil {
				frames = append(frames, tc.in)
			}
		}
		decodePipelined(t, NewRequestDecoder, frames, func(d *Decoder) []byte {
			return AppendRequest(nil, d.Request())
		})
	})
	t.Run("responses", func(t *testing.T) {
		var frames [][]byte
		for _, tc := range responseCases() {
			if tc.want != nil {
				frames = append(frames, tc.in)
			}
		}
		decodePipelined(t, NewResponseDecoder, frames, func(d *Decoder) []byte {
			return AppendResponse(nil, d.Response())
		})
	})
}

// decodePipelined decodes frames laid end to end in one buffer: each Decode call must take
// exactly one frame, which reencode must give back byte for byte, nothing may be left at the
// end, and every way of cutting the buffer must give the same events.
func decodePipelined(t *testing.T, newDec func() *Decoder, frames [][]byte, reencode func(*Decoder) []byte) {
	t.Helper()
	all := bytes.Join(frames, nil)
	d := newDec()
	rest := all
	for i, f := range frames {
		n, done, err := d.Decode(rest)
		if err != nil || !done || n != len(f) {
			t.Fatalf("frame %d: Decode = %d, %v, %v; want %d, true, nil", i, n, done, err, len(f))
		}
		if got := reencode(d); !bytes.Equal(got, f) {
			t.Fatalf("frame %d: decoded frame re-encodes as %q, want %q", i, got, f)
		}
		rest = rest[n:]
	}
	if n, done, err := d.Decode(rest); n != 0 || done || err != nil || d.Partial() {
		t.Fatalf("Decode at the end = %d, %v, %v, partial %v", n, done, err, d.Partial())
	}
	whole := feed(t, newDec(), all)
	for name, chunks := range splits(all) {
		if strings.HasPrefix(name, "cut@") && len(chunks[0])%7 != 0 {
			continue // every cut would be quadratic; every 7th is plenty
		}
		sameEvents(t, name, feed(t, newDec(), chunks...), whole)
	}
}

// TestDecodeOversizedStopsAt192 checks that the decoder gives up after
// exactly MaxFrame bytes of a frame, whatever follows and however much of it
// is offered in one call.
func TestDecodeOversizedStopsAt192(t *testing.T) {
	ping := frame('P', u64(1))
	huge := acq(1, 0, 30, strings.Repeat("k", 1000))
	in := append(append(bytes.Clone(ping), huge...), ping...)

	d := NewRequestDecoder()
	n, done, err := d.Decode(in)
	if n != len(ping) || !done || err != nil {
		t.Fatalf("ping: Decode = %d, %v, %v", n, done, err)
	}
	n, done, err = d.Decode(in[n:])
	if n != MaxFrame || done || !errors.Is(err, ErrOversized) {
		t.Fatalf("oversized: Decode = %d, %v, %v; want %d, false, ErrOversized", n, done, err, MaxFrame)
	}

	// Byte by byte, the error comes with the 192nd byte and not before.
	d = NewRequestDecoder()
	for i := range MaxFrame {
		n, done, err := d.Decode(huge[i : i+1])
		if i < MaxFrame-1 && (n != 1 || done || err != nil) {
			t.Fatalf("byte %d: Decode = %d, %v, %v", i+1, n, done, err)
		}
		if i == MaxFrame-1 && (n != 1 || !errors.Is(err, ErrOversized)) {
			t.Fatalf("byte 192: Decode = %d, %v, %v; want ErrOversized", n, done, err)
		}
	}
}

func TestDecodeExactly192(t *testing.T) {
	for _, in := range [][]byte{acq(1, 0, 30, strings.Repeat("k", 179)), rel(1, 1, strings.Repeat("k", 174))} {
		if len(in) != MaxFrame {
			t.Fatalf("test frame is %d bytes, want %d", len(in), MaxFrame)
		}
		n, done, err := NewRequestDecoder().Decode(in)
		if n != MaxFrame || !done || err != nil {
			t.Fatalf("%c: Decode = %d, %v, %v; want 192, true, nil", in[0], n, done, err)
		}
	}
}

func TestDecoderZeroValueDecodesRequests(t *testing.T) {
	var d Decoder
	n, done, err := d.Decode(frame('P', u64(3)))
	if n != 10 || !done || err != nil || d.Request() == nil || d.Request().Owner != 3 || d.Response() != nil {
		t.Fatalf("zero Decoder: %d, %v, %v, %v", n, done, err, d.Request())
	}
}

func TestDecoderReset(t *testing.T) {
	d := NewResponseDecoder()
	if _, _, err := d.Decode([]byte("X")); err == nil {
		t.Fatal("want an error for op X")
	}
	d.Reset()
	if d.Partial() {
		t.Fatal("Partial after Reset")
	}
	// A partial frame is dropped, and the decoder still decodes responses.
	if _, _, err := d.Decode(noLF('E', u64(1), []byte("unavail"))); err != nil || !d.Partial() {
		t.Fatalf("partial frame: %v, partial %v", err, d.Partial())
	}
	d.Reset()
	n, done, err := d.Decode(frame('T', u64(8)))
	if n != 10 || !done || err != nil || d.Response() == nil || d.Response().Op != OpTimeout {
		t.Fatalf("after Reset: %d, %v, %v, %v", n, done, err, d.Response())
	}
}

func TestDecodeNothing(t *testing.T) {
	d := NewRequestDecoder()
	if n, done, err := d.Decode(nil); n != 0 || done || err != nil || d.Partial() {
		t.Fatalf("Decode(nil) = %d, %v, %v, partial %v", n, done, err, d.Partial())
	}
	// An empty call after a frame ends that frame's validity.
	d.Decode(frame('P', u64(1)))
	if d.Request() == nil {
		t.Fatal("no request after a whole frame")
	}
	d.Decode(nil)
	if d.Request() != nil {
		t.Fatal("Request still available after the next Decode call")
	}
}

func TestDecodedKeyCannotGrowIntoBuffer(t *testing.T) {
	d := NewRequestDecoder()
	d.Decode(acq(1, 0, 30, "abc"))
	key := d.Request().Key
	if len(key) != 3 || cap(key) != 3 {
		t.Fatalf("key len %d cap %d, want 3 and 3", len(key), cap(key))
	}
}

func TestDecodedReasonOutlivesBuffer(t *testing.T) {
	d := NewResponseDecoder()
	d.Decode(frame('E', u64(1), []byte("first_unknown")))
	r := d.Response().Reason
	d.Decode(frame('E', u64(1), []byte("other_reason_x")))
	if r != "first_unknown" {
		t.Fatalf("reason changed to %q after the next Decode", r)
	}
}

func TestFrameErrorMessage(t *testing.T) {
	_, _, err := NewRequestDecoder().Decode([]byte("Z"))
	var fe *FrameError
	if !errors.As(err, &fe) || fe.Op != 'Z' || fe.Response || fe.Offset != 1 {
		t.Fatalf("err = %#v", err)
	}
	for _, want := range []string{"unknown op", "request", "bad_request", "close"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("request error %q does not mention %q", err, want)
		}
	}
	_, _, err = NewResponseDecoder().Decode([]byte("Z"))
	if !errors.As(err, &fe) || !fe.Response || !strings.Contains(err.Error(), "response") {
		t.Fatalf("response error = %v", err)
	}
}
