package wire

import (
	"bytes"
	"strings"
	"testing"
)

func TestAppendRequest(t *testing.T) {
	tests := []struct {
		name string
		r    Request
		want []byte
	}{
		{"acquire", Request{Op: OpAcquire, Owner: 7, Wait: 3, Lease: 30, Key: []byte("orders/42")},
			acq(7, 3, 30, "orders/42")},
		{"acquire LF header", Request{Op: OpAcquire, Owner: lfU64, Wait: 10, Lease: 0x0A0A, Key: []byte("k")},
			frame('A', lf8, []byte{10, 10, 10}, []byte("k"))},
		{"acquire ignores release fields", Request{Op: OpAcquire, Owner: 1, Lease: 1, Token: 99, Key: []byte("k"), Proof: proofOf(1)},
			acq(1, 0, 1, "k")},
		{"release", Request{Op: OpRelease, Owner: 9, Token: 12345, Key: []byte(cyrillic64)},
			rel(9, 12345, cyrillic64)},
		{"ping", Request{Op: OpPing, Owner: 42, Key: []byte("ignored")}, frame('P', u64(42))},
		{"hello", Request{Op: OpHello, Hello: Hello{Version: 1, Flags: 0, Nonce: nonce(5)}},
			frame('H', []byte{1, 0}, fill(5, 32))},
		{"proof", Request{Op: OpProof, Proof: proofOf(0xEE)}, frame('V', fill(0xEE, 32))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("prefix")
			got := AppendRequest(bytes.Clone(prefix), &tc.r)
			if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], tc.want) {
				t.Fatalf("AppendRequest = %q\nwant %q", got, append(prefix, tc.want...))
			}
		})
	}
}

func TestAppendResponse(t *testing.T) {
	tests := []struct {
		name string
		r    Response
		want []byte
	}{
		{"acquired", Response{Op: OpAcquire, Owner: 5, Token: MaxToken}, frame('A', u64(5), u64(MaxToken))},
		{"timed out", Response{Op: OpTimeout, Owner: 5, Token: 9}, frame('T', u64(5))},
		{"busy", Response{Op: OpBusy, Owner: 5}, frame('B', u64(5))},
		{"released", Response{Op: OpRelease, Owner: lfU64}, frame('R', lf8)},
		{"not held", Response{Op: OpNotHeld, Owner: 5}, frame('N', u64(5))},
		{"pong", Response{Op: OpPing, Owner: 5}, frame('P', u64(5))},
		{"error", Response{Op: OpError, Owner: 0, Reason: ReasonBadRequest}, frame('E', u64(0), []byte("bad_request"))},
		{"hello", Response{Op: OpHello, Hello: Hello{Version: 1, Flags: FlagAuthRequired, Nonce: nonce(6)}},
			frame('H', []byte{1, 1}, fill(6, 32))},
		{"proof", Response{Op: OpProof, Proof: proofOf(0x0A)}, frame('V', fill(0x0A, 32))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AppendResponse(nil, &tc.r); !bytes.Equal(got, tc.want) {
				t.Fatalf("AppendResponse = %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestAppendPanicsOnWrongOp(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"request T", func() { AppendRequest(nil, &Request{Op: OpTimeout}) }},
		{"request E", func() { AppendRequest(nil, &Request{Op: OpError}) }},
		{"request zero", func() { AppendRequest(nil, &Request{}) }},
		{"response X", func() { AppendResponse(nil, &Response{Op: 'X'}) }},
		{"response zero", func() { AppendResponse(nil, &Response{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.Contains(s, "not a re") {
					t.Fatalf("recovered %v, want a panic naming the op", r)
				}
			}()
			tc.f()
		})
	}
}

// TestMaxFrameFitsEveryValidFrame checks the promise in the Append docs: a
// buffer of MaxFrame bytes holds any valid frame.
func TestMaxFrameFitsEveryValidFrame(t *testing.T) {
	long := []byte(strings.Repeat("k", MaxKey))
	if n := len(AppendRequest(nil, &Request{Op: OpRelease, Key: long})); n != maxValidFrame || n > MaxFrame {
		t.Fatalf("largest request is %d bytes, want %d", n, maxValidFrame)
	}
	if n := len(AppendResponse(nil, &Response{Op: OpError, Reason: Reason(strings.Repeat("z", MaxReasonLen))})); n > MaxFrame {
		t.Fatalf("largest error response is %d bytes", n)
	}
}
