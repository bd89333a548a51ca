package wire

import (
	"testing"
	"time"
)

// The hot paths must not allocate: a server decodes every request and
// encodes every response, a client the reverse.

func assertNoAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	if n := testing.AllocsPerRun(200, f); n != 0 {
		t.Errorf("%s: %v allocs per run, want 0", name, n)
	}
}

// decodeFrame feeds chunks that together hold exactly one frame and fails
// unless that frame completes with the last chunk.
func decodeFrame(t testing.TB, d *Decoder, chunks ...[]byte) {
	for i, c := range chunks {
		n, done, err := d.Decode(c)
		if err != nil || n != len(c) || done != (i == len(chunks)-1) {
			t.Fatalf("chunk %d: Decode = %d, %v, %v", i, n, done, err)
		}
	}
}

func TestDecodeAllocs(t *testing.T) {
	acquire := acq(1234, 5, 30, "orders/42")
	release := rel(1234, 99, "orders/42")
	d := NewRequestDecoder()
	assertNoAllocs(t, "acquire whole", func() { decodeFrame(t, d, acquire) })
	assertNoAllocs(t, "acquire split in header", func() { decodeFrame(t, d, acquire[:5], acquire[5:]) })
	assertNoAllocs(t, "acquire split in key", func() { decodeFrame(t, d, acquire[:15], acquire[15:]) })
	assertNoAllocs(t, "release whole", func() { decodeFrame(t, d, release) })
	assertNoAllocs(t, "release split in header", func() { decodeFrame(t, d, release[:9], release[9:]) })
	assertNoAllocs(t, "release split before LF", func() { decodeFrame(t, d, release[:len(release)-1], release[len(release)-1:]) })
	assertNoAllocs(t, "check acquire", func() {
		decodeFrame(t, d, acquire)
		if d.Request().Check() != "" {
			t.Fatal("acquire invalid")
		}
	})

	r := NewResponseDecoder()
	for _, f := range responseFrames() {
		assertNoAllocs(t, "response "+string(f[0]), func() { decodeFrame(t, r, f) })
	}
	for _, reason := range Reasons {
		f := frame('E', u64(7), []byte(reason))
		assertNoAllocs(t, "error "+string(reason), func() {
			decodeFrame(t, r, f)
			if r.Response().Reason != reason {
				t.Fatal("wrong reason")
			}
		})
	}
}

func TestEncodeAllocs(t *testing.T) {
	buf := make([]byte, 0, MaxFrame)
	for _, r := range sampleResponses() {
		assertNoAllocs(t, "response "+r.Op.String(), func() { buf = AppendResponse(buf[:0], &r) })
	}
	for _, r := range sampleRequests() {
		assertNoAllocs(t, "request "+r.Op.String(), func() { buf = AppendRequest(buf[:0], &r) })
	}
}

func TestKeyAllocs(t *testing.T) {
	for _, k := range []string{"orders/42", cyrillic64, korean42, "a b", "\xff"} {
		kb := []byte(k)
		assertNoAllocs(t, "CheckKey "+k, func() { _ = CheckKey(kb) })
		assertNoAllocs(t, "CheckClientKey "+k, func() { _ = CheckClientKey(k) })
	}
}

// responseFrames holds one frame of every response op.
func responseFrames() [][]byte {
	var fs [][]byte
	for _, r := range sampleResponses() {
		fs = append(fs, AppendResponse(nil, &r))
	}
	return fs
}

func sampleResponses() []Response {
	return []Response{
		{Op: OpAcquire, Owner: 1234, Token: 1 << 40},
		{Op: OpTimeout, Owner: 1234},
		{Op: OpBusy, Owner: 1234},
		{Op: OpRelease, Owner: 1234},
		{Op: OpNotHeld, Owner: 1234},
		{Op: OpPing, Owner: 1234},
		{Op: OpError, Owner: 1234, Reason: ReasonTokenExhausted},
		{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagAuthRequired, Nonce: nonce(3)}},
		{Op: OpProof, Proof: proofOf(4)},
	}
}

func sampleRequests() []Request {
	return []Request{
		{Op: OpAcquire, Owner: 1234, Wait: 5, Lease: 30, Key: []byte("orders/42")},
		{Op: OpRelease, Owner: 1234, Token: 99, Key: []byte("orders/42")},
		{Op: OpPing, Owner: 1234},
		{Op: OpHello, Hello: Hello{Version: Version, Nonce: nonce(5)}},
		{Op: OpProof, Proof: proofOf(6)},
	}
}

// TestLeasesAllocs: the frames of revision 2 are on the hot path too, and SetFlags, the
// negotiation helpers and the age do not allocate either.
func TestLeasesAllocs(t *testing.T) {
	extend := ext(1234, 99, 30, "orders/42")
	d := NewRequestDecoder()
	d.SetFlags(FlagLeases)
	assertNoAllocs(t, "extend whole", func() { decodeFrame(t, d, extend) })
	assertNoAllocs(t, "extend split in header", func() { decodeFrame(t, d, extend[:12], extend[12:]) })
	assertNoAllocs(t, "extend split in key", func() { decodeFrame(t, d, extend[:21], extend[21:]) })
	assertNoAllocs(t, "check extend", func() {
		decodeFrame(t, d, extend)
		if d.Request().Check() != "" {
			t.Fatal("extend invalid")
		}
	})
	r := NewResponseDecoder()
	r.SetFlags(FlagLeases)
	for _, f := range [][]byte{granted(1234, 1<<40, 1500), frame('L', u64(1234)), frame('N', u64(1234))} {
		assertNoAllocs(t, "revised response "+string(f[0]), func() { decodeFrame(t, r, f) })
	}
	unsupported := frame('E', u64(7), []byte(ReasonUnsupported))
	assertNoAllocs(t, "error unsupported", func() {
		decodeFrame(t, r, unsupported)
		if r.Response().Reason != ReasonUnsupported {
			t.Fatal("wrong reason")
		}
	})

	buf := make([]byte, 0, MaxFrame)
	for _, q := range sampleLeasesRequests() {
		assertNoAllocs(t, "request "+q.Op.String(), func() { buf = AppendRequest(buf[:0], &q) })
	}
	for _, p := range sampleLeasesResponses() {
		assertNoAllocs(t, "response "+p.Op.String(), func() { buf = AppendResponse(buf[:0], &p) })
	}
	var sink uint32
	assertNoAllocs(t, "negotiation", func() {
		d.SetFlags(EchoFlags(FlagLeases, FlagLeases))
		f, _ := AcceptFlags(FlagLeases, 0xFF)
		sink += uint32(f) + AgeMillis(1500*time.Millisecond)
	})
}

func sampleLeasesRequests() []Request {
	return []Request{
		{Op: OpExtend, Owner: 1234, Token: 99, Lease: 30, Key: []byte("orders/42")},
		{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagLeases, Nonce: nonce(5)}},
	}
}

func sampleLeasesResponses() []Response {
	return []Response{
		{Op: OpGranted, Owner: 1234, Token: 1 << 40, Age: 1500},
		{Op: OpExtend, Owner: 1234},
		{Op: OpNotHeld, Owner: 1234},
		{Op: OpError, Owner: 1234, Reason: ReasonUnsupported},
		{Op: OpHello, Hello: Hello{Version: Version, Flags: FlagAuthRequired | FlagLeases, Nonce: nonce(3)}},
	}
}
