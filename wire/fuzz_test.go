package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The fuzz targets feed arbitrary bytes to a decoder and check that it never
// panics, never accepts more than MaxFrame bytes for one frame, decodes
// frames that re-encode to exactly the bytes it consumed, and gives the same
// results however the input is cut.

func FuzzDecodeRequest(f *testing.F) {
	var pipelined []byte
	for _, tc := range requestCases() {
		f.Add(tc.in, uint16(len(tc.in)/2))
		if tc.want != nil {
			pipelined = append(pipelined, tc.in...)
		}
	}
	f.Add(pipelined, uint16(100))
	f.Add(append(frame('P', lf8), acq(lfU64, 10, 0x0A0A, strings.Repeat("\n", 3))...), uint16(10))
	f.Add(append(rel(1, 2, "k"), acq(1, 0, 30, strings.Repeat("x", 300))...), uint16(30))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		checkDecode(t, false, data, int(cut))
	})
}

func FuzzDecodeResponse(f *testing.F) {
	var pipelined []byte
	for _, tc := range responseCases() {
		f.Add(tc.in, uint16(len(tc.in)/2))
		if tc.want != nil {
			pipelined = append(pipelined, tc.in...)
		}
	}
	f.Add(pipelined, uint16(100))
	f.Add(append(frame('A', lf8, lf8), frame('E', lf8, []byte("indeterminate"))...), uint16(17))
	f.Add(append(frame('T', u64(1)), frame('E', u64(1), fill('z', 300))...), uint16(30))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		checkDecode(t, true, data, int(cut))
	})
}

func checkDecode(t *testing.T, response bool, data []byte, cut int) {
	decoder, layouts := NewRequestDecoder, &requestLayouts
	if response {
		decoder, layouts = NewResponseDecoder, &responseLayouts
	}
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
			if ev.resp.Op == OpError && !ValidReason([]byte(ev.resp.Reason)) {
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
