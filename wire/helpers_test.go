package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// The helpers build frames byte by byte, independently of the encoder, so
// that the encoder and the decoder are both checked against the tables of
// docs/protocol.md rather than against each other.

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// frame joins an op, its parts and the final LF.
func frame(op byte, parts ...[]byte) []byte {
	b := []byte{op}
	for _, p := range parts {
		b = append(b, p...)
	}
	return append(b, '\n')
}

// noLF is a frame without its final LF: the start of a frame cut short.
func noLF(op byte, parts ...[]byte) []byte {
	f := frame(op, parts...)
	return f[:len(f)-1]
}

func fill(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

func nonce(c byte) [NonceSize]byte { return [NonceSize]byte(fill(c, NonceSize)) }

func proofOf(c byte) [ProofSize]byte { return [ProofSize]byte(fill(c, ProofSize)) }

// event is one result of feeding a decoder: a completed frame, a structural
// error, or (last) a frame left partial at the end of the input.
type event struct {
	raw     []byte // bytes of the frame consumed
	req     *Request
	resp    *Response
	err     error
	partial bool
}

// feed runs d over chunks in order and returns what it produced. It checks
// the Decode contract on the way: progress, at most one frame per call, the
// whole chunk consumed when no frame completes, no frame over MaxFrame.
func feed(t testing.TB, d *Decoder, chunks ...[]byte) []event {
	t.Helper()
	var evs []event
	var raw []byte
	for _, c := range chunks {
		for len(c) > 0 {
			n, done, err := d.Decode(c)
			if n < 0 || n > len(c) {
				t.Fatalf("Decode consumed %d of %d bytes", n, len(c))
			}
			raw = append(raw, c[:n]...)
			c = c[n:]
			if len(raw) > MaxFrame {
				t.Fatalf("decoder took %d bytes of one frame, more than MaxFrame", len(raw))
			}
			switch {
			case err != nil:
				if done {
					t.Fatalf("Decode returned done with error %v", err)
				}
				if n == 0 {
					t.Fatalf("Decode consumed nothing before error %v", err)
				}
				if d.Partial() != true || d.Request() != nil || d.Response() != nil {
					t.Fatalf("after error: Partial=%v Request=%v Response=%v", d.Partial(), d.Request(), d.Response())
				}
				if n2, done2, err2 := d.Decode([]byte("P")); n2 != 0 || done2 || err2 != err {
					t.Fatalf("decoder did not stay failed: %d %v %v", n2, done2, err2)
				}
				return append(evs, event{raw: raw, err: err})
			case done:
				if d.Partial() {
					t.Fatal("Partial after a completed frame")
				}
				evs = append(evs, event{raw: raw, req: cloneRequest(d.Request()), resp: cloneResponse(d.Response())})
				raw = nil
			default:
				if len(c) != 0 {
					t.Fatalf("Decode left %d bytes without completing a frame", len(c))
				}
				if d.Request() != nil || d.Response() != nil {
					t.Fatal("Request or Response non-nil although no frame completed")
				}
				if got, want := d.Partial(), len(raw) > 0; got != want {
					t.Fatalf("Partial = %v with %d bytes of a frame read", got, len(raw))
				}
			}
		}
	}
	if len(raw) > 0 {
		evs = append(evs, event{raw: raw, partial: true})
	}
	return evs
}

func cloneRequest(r *Request) *Request {
	if r == nil {
		return nil
	}
	c := *r
	if r.Key != nil {
		c.Key = bytes.Clone(r.Key)
	}
	return &c
}

func cloneResponse(r *Response) *Response {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// splits returns ways to cut b: whole, byte by byte, every cut in two, and
// some random cuts from a fixed seed.
func splits(b []byte) map[string][][]byte {
	s := map[string][][]byte{"whole": {b}}
	var bytewise [][]byte
	for i := range b {
		bytewise = append(bytewise, b[i:i+1])
	}
	s["bytewise"] = bytewise
	for i := 1; i < len(b); i++ {
		s["cut@"+strconv.Itoa(i)] = [][]byte{b[:i], b[i:]}
	}
	rng := rand.New(rand.NewPCG(uint64(len(b)), 7))
	for k := range 20 {
		var cs [][]byte
		for rest := b; len(rest) > 0; {
			n := 1 + rng.IntN(min(len(rest), 1+rng.IntN(64)))
			cs = append(cs, rest[:n])
			rest = rest[n:]
		}
		s["random"+strconv.Itoa(k)] = cs
	}
	return s
}

// sameEvents fails t when two event lists differ.
func sameEvents(t testing.TB, name string, got, want []event) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: events differ\n got: %s\nwant: %s", name, dump(got), dump(want))
	}
}

func dump(evs []event) string {
	var b bytes.Buffer
	for _, e := range evs {
		b.WriteString("\n  ")
		switch {
		case e.err != nil:
			b.WriteString("err " + e.err.Error())
		case e.partial:
			b.WriteString("partial")
		case e.req != nil:
			b.WriteString("req " + e.req.Op.String())
		case e.resp != nil:
			b.WriteString("resp " + e.resp.Op.String())
		}
		b.WriteString(" raw=" + strconv.Itoa(len(e.raw)))
	}
	return b.String()
}

// isFrameError reports whether err is a *FrameError wrapping want at offset.
func isFrameError(err, want error, offset int) bool {
	var fe *FrameError
	return errors.As(err, &fe) && errors.Is(err, want) && fe.Offset == offset
}
