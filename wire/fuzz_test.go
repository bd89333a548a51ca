package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The fuzz targets feed arbitrary bytes to a decoder and check that it never
// panics, never accepts more than MaxFrame bytes for one frame, decodes
// frames that re-encode to exactly the bytes it consumed, and gives the same
// results however the input is cut. Every input runs through a latch/1
// decoder and through one with FlagLeases (revision 2), and the two must
// agree up to the first frame whose op the revision changes.

func FuzzDecodeRequest(f *testing.F) {
	var pipelined, revisedPipelined []byte
	for _, tc := range requestCases() {
		f.Add(tc.in, uint16(len(tc.in)/2))
		if tc.want != nil {
			pipelined = append(pipelined, tc.in...)
		}
	}
	for _, tc := range append(leasesRequestCases(), leasesV1RequestCases()...) {
		f.Add(tc.in, uint16(len(tc.in)/2))
		if tc.want != nil {
			revisedPipelined = append(revisedPipelined, tc.in...)
		}
	}
	f.Add(pipelined, uint16(100))
	f.Add(revisedPipelined, uint16(100))
	f.Add(append(frame('P', lf8), acq(lfU64, 10, 0x0A0A, strings.Repeat("\n", 3))...), uint16(10))
	f.Add(append(rel(1, 2, "k"), acq(1, 0, 30, strings.Repeat("x", 300))...), uint16(30))
	f.Add(append(acq(1, 0, 30, "k"), frame('L', lf8, lf8, fill('\n', 4))...), uint16(17))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		checkDecode(t, false, 0, data, int(cut))
		checkDecode(t, false, FlagLeases, data, int(cut))
		checkRevisionDiff(t, false, data)
	})
}

func FuzzDecodeResponse(f *testing.F) {
	var pipelined, revisedPipelined []byte
	for _, tc := range responseCases() {
		f.Add(tc.in, uint16(len(tc.in)/2))
		if tc.want != nil {
			pipelined = append(pipelined, tc.in...)
		}
	}
	for _, tc := range append(leasesResponseCases(), leasesV1ResponseCases()...) {
		f.Add(tc.in, uint16(len(tc.in)/2))
		if tc.want != nil && tc.in[0] != 'A' {
			revisedPipelined = append(revisedPipelined, tc.in...)
		}
	}
	f.Add(pipelined, uint16(100))
	f.Add(revisedPipelined, uint16(100))
	f.Add(append(frame('A', lf8, lf8), frame('E', lf8, []byte("indeterminate"))...), uint16(17))
	f.Add(append(frame('T', u64(1)), frame('E', u64(1), fill('z', 300))...), uint16(30))
	f.Add(append(frame('G', lf8, lf8, fill('\n', 4)), frame('L', lf8)...), uint16(21))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		checkDecode(t, true, 0, data, int(cut))
		checkDecode(t, true, FlagLeases, data, int(cut))
		checkRevisionDiff(t, true, data)
	})
}

// newDecoder returns a decoder for the direction with these flags.
func newDecoder(response bool, flags uint8) func() *Decoder {
	return func() *Decoder {
		d := NewRequestDecoder()
		if response {
			d = NewResponseDecoder()
		}
		d.SetFlags(flags)
		return d
	}
}

// checkRevisionDiff decodes data on a latch/1 connection and on a revised one: the events
// must be the same up to the first frame whose op revision 2 changes (request L; response G,
// L and A), where the decoder that does not know the op stops with ErrUnknownOp at its first
// byte and the other has taken that byte as an op.
func checkRevisionDiff(t *testing.T, response bool, data []byte) {
	v1 := feed(t, newDecoder(response, 0)(), data)
	rev := feed(t, newDecoder(response, FlagLeases)(), data)
	i := 0
	for i < len(v1) && i < len(rev) && reflect.DeepEqual(v1[i], rev[i]) {
		i++
	}
	if i == len(v1) && i == len(rev) {
		return
	}
	if i == len(v1) || i == len(rev) {
		t.Fatalf("one decoder stopped at event %d, the other went on:\nlatch/1 %s\nrevised %s", i, dump(v1), dump(rev))
	}
	op := v1[i].raw[0]
	unknown, known := v1, rev
	if response && responseLayouts[op].hdr != 0 {
		unknown, known = rev, v1 // response A, which a revised connection does not carry
	}
	changed := requestLayouts[op] != leasesRequestLayouts[op]
	if response {
		changed = responseLayouts[op] != leasesResponseLayouts[op]
	}
	if !changed || i != len(unknown)-1 || !errors.Is(unknown[i].err, ErrUnknownOp) ||
		len(known[i].raw) == 0 || known[i].raw[0] != op || errors.Is(known[i].err, ErrUnknownOp) {
		t.Fatalf("the decoders part at event %d (op %v) otherwise than at a revised op:\nlatch/1 %s\nrevised %s", i, Op(op), dump(v1), dump(rev))
	}
}

func checkDecode(t *testing.T, response bool, flags uint8, data []byte, cut int) {
	decoder := newDecoder(response, flags)
	layouts := decoder().layouts()
	whole := feed(t, decoder(), data)
	total := 0
	for i, ev := range whole {
		total += len(ev.raw)
		last := i == len(whole)-1
		switch {
		case ev.err != nil:
			if !last {
				t.Fatal("events after an error")
			}
			var fe *FrameError
			if !errors.As(ev.err, &fe) || fe.Offset != len(ev.raw) || fe.Response != response {
				t.Fatalf("error %v does not describe the %d bytes consumed", ev.err, len(ev.raw))
			}
			switch {
			case errors.Is(ev.err, ErrOversized):
				if len(ev.raw) != MaxFrame || bytes.IndexByte(ev.raw[1+int(layouts[ev.raw[0]].hdr):], '\n') >= 0 {
					t.Fatalf("oversized after %d bytes: %q", len(ev.raw), ev.raw)
				}
			case errors.Is(ev.err, ErrUnknownOp):
				if len(ev.raw) != 1 {
					t.Fatalf("unknown op found after %d bytes", len(ev.raw))
				}
			case errors.Is(ev.err, ErrUnexpectedTail), errors.Is(ev.err, ErrBadReason):
			default:
				t.Fatalf("unexpected error %v", ev.err)
			}
		case ev.partial:
			if !last || len(ev.raw) >= MaxFrame {
				t.Fatalf("partial frame of %d bytes", len(ev.raw))
			}
		case ev.req != nil:
			if got := AppendRequest(nil, ev.req); !bytes.Equal(got, ev.raw) {
				t.Fatalf("request re-encodes as %q, consumed %q", got, ev.raw)
			}
			if ev.req.Check() == "" && ev.req.Key != nil && CheckKey(ev.req.Key) != nil {
				t.Fatalf("request with bad key %q passes Check", ev.req.Key)
			}
		case ev.resp != nil:
			if got := AppendResponse(nil, ev.resp); !bytes.Equal(got, ev.raw) {
				t.Fatalf("response re-encodes as %q, consumed %q", got, ev.raw)
			}
			if ev.resp.Op == OpError && !validReason([]byte(ev.resp.Reason)) {
				t.Fatalf("accepted reason %q", ev.resp.Reason)
			}
		default:
			t.Fatal("empty event")
		}
	}
	if total > len(data) {
		t.Fatalf("consumed %d of %d bytes", total, len(data))
	}
	cut %= len(data) + 1
	sameEvents(t, "cut", feed(t, decoder(), data[:cut], data[cut:]), whole)
	if len(data) <= 4*MaxFrame {
		var bytewise [][]byte
		for i := range data {
			bytewise = append(bytewise, data[i:i+1])
		}
		sameEvents(t, "bytewise", feed(t, decoder(), bytewise...), whole)
	}
}
