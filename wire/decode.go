package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Structural errors. After one of them the framing of the stream can no
// longer be trusted: a server replies E bad_request with owner 0 and closes
// the connection, a client closes the connection. Decode returns them
// wrapped in a *FrameError; test for them with errors.Is.
var (
	ErrUnknownOp      = errors.New("wire: unknown op byte for this direction")
	ErrOversized      = errors.New("wire: frame reached 192 bytes without its LF")
	ErrUnexpectedTail = errors.New("wire: bytes between the fixed header and LF of an op that has no tail")
	ErrBadReason      = errors.New("wire: E reason is not 1..32 bytes of [a-z_]")
)

// FrameError is a structural error found by a Decoder.
type FrameError struct {
	Response bool  // the frame was a response (read by a client), else a request
	Op       Op    // first byte of the frame
	Offset   int   // bytes of the frame read, up to and including the faulty one
	Err      error // ErrUnknownOp, ErrOversized, ErrUnexpectedTail or ErrBadReason
}

// Error says what was wrong, where, and what the reader must do now.
func (e *FrameError) Error() string {
	dir, todo := "request", "reply E bad_request with owner 0 and close the connection"
	if e.Response {
		dir, todo = "response", "close the connection, the server does not speak latch/1"
	}
	return fmt.Sprintf("%v (%s frame, op %v, byte %d); framing is lost: %s",
		e.Err, dir, e.Op, e.Offset, todo)
}

// Unwrap returns the sentinel error.
func (e *FrameError) Unwrap() error { return e.Err }

// Decoder splits a byte stream into frames and parses them. It keeps the
// bytes of a partial frame between calls (never more than MaxFrame), so the
// stream may arrive in pieces of any size. A Decoder is for one connection
// and one goroutine.
//
// The zero Decoder decodes requests; NewResponseDecoder makes one that
// decodes responses. Either decodes the ops of latch/1 until SetFlags turns on
// a revision.
type Decoder struct {
	response bool           // decodes responses (client side), else requests
	flags    uint8          // the revisions in force (OfferFlags bits), from SetFlags
	lay      layout         // layout of the frame in buf, valid when n > 0
	n        int            // bytes of the current frame in buf, LF excluded
	done     bool           // buf holds a whole frame, parsed into req or resp
	err      error          // sticky structural error
	req      Request        // the last request, when done && !response
	resp     Response       // the last response, when done && response
	buf      [MaxFrame]byte // the current frame
}

// NewRequestDecoder returns a Decoder for the server side: it accepts the
// request ops A, R, P, H and V (and L after SetFlags(FlagLeases)).
func NewRequestDecoder() *Decoder { return &Decoder{} }

// NewResponseDecoder returns a Decoder for the client side: it accepts the
// response ops A, T, B, R, N, P, E, H and V (after SetFlags(FlagLeases): G
// and L, and no longer A).
func NewResponseDecoder() *Decoder { return &Decoder{response: true} }

// SetFlags sets the revisions in force on the connection, which decide the ops d accepts
// from the next frame on: the server passes EchoFlags' result, the client AcceptFlags'.
// With FlagLeases, d decodes the ops of revision 2 (request L; responses G and L instead
// of A); with 0, the flags of a new Decoder, it decodes latch/1 exactly, and every op of
// revision 2 is ErrUnknownOp at its first byte. Bits outside OfferFlags are dropped.
//
// Call it between frames, once the hellos are exchanged: the server when it has decided
// its hello, the client when it has read and accepted the server's. The hello and proof
// frames decode the same either way.
func (d *Decoder) SetFlags(flags uint8) { d.flags = flags & OfferFlags }

// Flags returns the revisions set by SetFlags.
func (d *Decoder) Flags() uint8 { return d.flags }

// layouts is the op table for d's direction and revisions.
func (d *Decoder) layouts() *[256]layout {
	leases := d.flags&FlagLeases != 0
	switch {
	case d.response && leases:
		return &leasesResponseLayouts
	case d.response:
		return &responseLayouts
	case leases:
		return &leasesRequestLayouts
	}
	return &requestLayouts
}

// Decode consumes bytes from p up to and including the end of at most one
// frame and returns how many it consumed. When done is true a frame has
// completed and Request or Response returns it until the next call to
// Decode. When done is false and err is nil, all of p was consumed and the
// frame (if one has begun) continues in the next call.
//
// The fixed header of each op is read by length, so it may contain LF; the
// tail ends at the first LF after it. A request key is not checked here:
// use Request.Check. A non-nil err is structural (see FrameError); the
// Decoder then stays failed and returns the same error until Reset.
func (d *Decoder) Decode(p []byte) (n int, done bool, err error) {
	if d.err != nil {
		return 0, false, d.err
	}
	if d.done {
		d.done, d.n = false, 0
	}
	if len(p) == 0 {
		return 0, false, nil
	}
	i := 0
	if d.n == 0 {
		op := p[0]
		d.lay = d.layouts()[op]
		d.buf[0], d.n, i = op, 1, 1
		if d.lay.hdr == 0 {
			return i, false, d.fail(ErrUnknownOp, 1)
		}
	}
	end := 1 + int(d.lay.hdr)
	if d.n < end {
		c := copy(d.buf[d.n:end], p[i:])
		d.n += c
		i += c
		if d.n < end {
			return i, false, nil
		}
	}
	if i == len(p) {
		return i, false, nil
	}
	switch d.lay.tail {
	case tailKey:
		return d.key(p, i)
	case tailReason:
		return d.reason(p, i, end)
	}
	if p[i] != '\n' {
		return i + 1, false, d.fail(ErrUnexpectedTail, d.n+1)
	}
	d.finish()
	return i + 1, true, nil
}

// key reads a key tail from p[i:]: everything up to LF, as long as the
// frame stays within MaxFrame bytes.
func (d *Decoder) key(p []byte, i int) (int, bool, error) {
	rest := p[i:]
	if room := MaxFrame - d.n; len(rest) > room {
		rest = rest[:room]
	}
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		d.n += copy(d.buf[d.n:], rest[:j])
		d.finish()
		return i + j + 1, true, nil
	}
	d.n += copy(d.buf[d.n:], rest)
	i += len(rest)
	if d.n == MaxFrame {
		return i, false, d.fail(ErrOversized, MaxFrame)
	}
	return i, false, nil
}

// reason reads an E reason from p[i:], failing at the first byte that cannot
// belong to a valid reason. The reason starts at d.buf[start].
func (d *Decoder) reason(p []byte, i, start int) (int, bool, error) {
	for ; i < len(p); i++ {
		c := p[i]
		if c == '\n' {
			if d.n == start {
				return i + 1, false, d.fail(ErrBadReason, d.n+1)
			}
			d.finish()
			return i + 1, true, nil
		}
		if !reasonByte(c) || d.n-start == MaxReasonLen {
			return i + 1, false, d.fail(ErrBadReason, d.n+1)
		}
		d.buf[d.n] = c
		d.n++
	}
	return i, false, nil
}

func (d *Decoder) fail(err error, offset int) error {
	d.err = &FrameError{Response: d.response, Op: Op(d.buf[0]), Offset: offset, Err: err}
	return d.err
}

// finish parses the whole frame in buf.
func (d *Decoder) finish() {
	d.done = true
	f := d.buf[:d.n:d.n]
	if d.response {
		d.resp.parse(f)
	} else {
		d.req.parse(f)
	}
}

// Request returns the request decoded by the last call to Decode, or nil if
// that call completed no frame or d decodes responses. The Request and its
// Key are overwritten by the next call to Decode.
func (d *Decoder) Request() *Request {
	if !d.done || d.response {
		return nil
	}
	return &d.req
}

// Response returns the response decoded by the last call to Decode, or nil
// if that call completed no frame or d decodes requests. The Response is
// overwritten by the next call to Decode. A known E reason is the Reason
// constant itself (no allocation); an unknown valid one is a new string.
func (d *Decoder) Response() *Response {
	if !d.done || !d.response {
		return nil
	}
	return &d.resp
}

// Partial reports whether a frame has begun and not yet completed: the
// server's progress timeout runs, and end of stream now means a frame was
// cut short. It stays true after a structural error, until Reset.
func (d *Decoder) Partial() bool { return d.n > 0 && !d.done }

// Reset discards any partial frame and a structural error, keeping the
// direction the Decoder decodes and its flags.
func (d *Decoder) Reset() { *d = Decoder{response: d.response, flags: d.flags} }

// parse fills r from f, a whole request frame without its LF whose op and
// length the Decoder has checked.
func (r *Request) parse(f []byte) {
	be := binary.BigEndian
	*r = Request{Op: Op(f[0])}
	switch r.Op {
	case OpAcquire:
		r.Owner = be.Uint64(f[1:])
		r.Wait = f[9]
		r.Lease = be.Uint16(f[10:])
		r.Key = f[12:]
	case OpRelease:
		r.Owner = be.Uint64(f[1:])
		r.Token = be.Uint64(f[9:])
		r.Key = f[17:]
	case OpPing:
		r.Owner = be.Uint64(f[1:])
	case OpExtend:
		r.Owner = be.Uint64(f[1:])
		r.Token = be.Uint64(f[9:])
		r.Lease = be.Uint16(f[17:])
		r.Key = f[19:]
	case OpHello:
		r.Hello = parseHello(f[1:])
	case OpProof:
		r.Proof = [ProofSize]byte(f[1:])
	}
}

// parse fills r from f, a whole response frame without its LF whose op,
// length and reason the Decoder has checked.
func (r *Response) parse(f []byte) {
	be := binary.BigEndian
	*r = Response{Op: Op(f[0])}
	switch r.Op {
	case OpAcquire:
		r.Owner = be.Uint64(f[1:])
		r.Token = be.Uint64(f[9:])
	case OpGranted:
		r.Owner = be.Uint64(f[1:])
		r.Token = be.Uint64(f[9:])
		r.Age = be.Uint32(f[17:])
	case OpTimeout, OpBusy, OpRelease, OpNotHeld, OpPing, OpExtend:
		r.Owner = be.Uint64(f[1:])
	case OpError:
		r.Owner = be.Uint64(f[1:])
		reason, ok := knownReason(f[9:])
		if !ok {
			reason = Reason(f[9:])
		}
		r.Reason = reason
	case OpHello:
		r.Hello = parseHello(f[1:])
	case OpProof:
		r.Proof = [ProofSize]byte(f[1:])
	}
}

func parseHello(h []byte) Hello {
	return Hello{Version: h[0], Flags: h[1], Nonce: [NonceSize]byte(h[2:])}
}
