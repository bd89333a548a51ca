package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

// ReadTimeout bounds every wait for a frame (or for the end of the stream) unless a method
// takes its own bound. It is generous on purpose: tests run on shared, noisy machines, and a
// frame that is merely late must not fail a test that a missing frame would.
const ReadTimeout = 15 * time.Second

// WriteTimeout bounds every write.
const WriteTimeout = 15 * time.Second

// Conn is one raw latch/1 client connection, used by one test goroutine at a time, except
// that one extra goroutine may write with Write (never Send: it may not fail the test from
// another goroutine) while the test reads.
type Conn struct {
	nc  *net.TCPConn
	dec *wire.Decoder
	buf []byte // bytes read and not yet decoded: buf[r:w]
	r   int
	w   int

	// ClientNonce and ServerNonce are the nonces of the last handshake made with Hello.
	ClientNonce, ServerNonce [wire.NonceSize]byte
}

// Dial connects to addr over TCP. The connection is closed when the test ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := DialErr(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// DialErr connects to addr and returns the error instead of failing a test, for tests that
// expect the dial to fail. The caller closes the connection.
func DialErr(addr string) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, WriteTimeout)
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc.(*net.TCPConn), dec: wire.NewResponseDecoder(), buf: make([]byte, 64<<10)}, nil
}

// SetFlags switches the connection's response decoder to the revisions flags (what
// wire.AcceptFlags gave for the server's hello): with wire.FlagLeases it reads G and L.
func (c *Conn) SetFlags(flags uint8) { c.dec.SetFlags(flags) }

// NetConn is the underlying TCP connection, for tests that need socket options, half
// closes or writes that bypass the helpers.
func (c *Conn) NetConn() *net.TCPConn { return c.nc }

// Close closes the connection. Closing twice is harmless.
func (c *Conn) Close() error { return c.nc.Close() }

// Hello makes the whole handshake of section 8 with a fresh nonce. With a nil secret it
// expects a server that does not ask for auth; with a secret it expects one that does, sends
// the client proof and checks the server's proof with wire.ServerProof. The nonces used are
// left in ClientNonce and ServerNonce.
func (c *Conn) Hello(t testing.TB, secret []byte) {
	t.Helper()
	cn, err := wire.NewNonce()
	if err != nil {
		t.Fatalf("client nonce: %v", err)
	}
	c.ClientNonce = cn
	c.Send(t, Hello(wire.Version, 0, cn))
	h := c.Next(t)
	if h.Op != wire.OpHello {
		t.Fatalf("handshake: got %s, want the server's H", Describe(h))
	}
	if h.Hello.Version != wire.Version {
		t.Fatalf("handshake: server hello version %d, want %d", h.Hello.Version, wire.Version)
	}
	c.ServerNonce = h.Hello.Nonce
	auth := h.Hello.Flags&wire.FlagAuthRequired != 0
	if h.Hello.Flags&^wire.FlagAuthRequired != 0 {
		t.Fatalf("handshake: server hello flags %#02x have bits other than auth required", h.Hello.Flags)
	}
	if secret == nil {
		if auth {
			t.Fatalf("handshake: server asks for auth, the test has no secret")
		}
		return
	}
	if !auth {
		t.Fatalf("handshake: server does not ask for auth although the test has a secret (downgrade)")
	}
	c.Send(t, Proof(wire.ClientProof(secret, c.ClientNonce, c.ServerNonce)))
	v := c.Next(t)
	if v.Op != wire.OpProof {
		t.Fatalf("handshake: got %s, want the server's V", Describe(v))
	}
	if want := wire.ServerProof(secret, c.ClientNonce, c.ServerNonce); !wire.ProofEqual(v.Proof, want) {
		t.Fatalf("handshake: server proof %x, want HMAC(secret, \"latch/1 server\"|cn|sn) = %x", v.Proof, want)
	}
}

// Send writes frames in one write (pipelined).
func (c *Conn) Send(t testing.TB, frames ...[]byte) {
	t.Helper()
	if len(frames) == 1 {
		c.Raw(t, frames[0])
		return
	}
	c.Raw(t, Concat(frames...))
}

// SendRequest encodes r with wire.AppendRequest and writes it.
func (c *Conn) SendRequest(t testing.TB, r *wire.Request) {
	t.Helper()
	c.Raw(t, wire.AppendRequest(nil, r))
}

// Raw writes b as is, whatever it holds.
func (c *Conn) Raw(t testing.TB, b []byte) {
	t.Helper()
	if err := c.Write(b, WriteTimeout); err != nil {
		t.Fatalf("write %d bytes: %v", len(b), err)
	}
}

// Write writes b within d and returns the error, for tests that expect writes to fail.
func (c *Conn) Write(b []byte, d time.Duration) error {
	c.nc.SetWriteDeadline(time.Now().Add(d))
	_, err := c.nc.Write(b)
	return err
}

// Trickle writes b one byte per write, gap apart.
func (c *Conn) Trickle(t testing.TB, b []byte, gap time.Duration) {
	t.Helper()
	for i := range b {
		if i > 0 {
			time.Sleep(gap)
		}
		c.Raw(t, b[i:i+1])
	}
}

// Do writes one frame and returns the next response.
func (c *Conn) Do(t testing.TB, frame []byte) wire.Response {
	t.Helper()
	c.Send(t, frame)
	return c.Next(t)
}

// Next returns the next response, waiting at most ReadTimeout.
func (c *Conn) Next(t testing.TB) wire.Response {
	t.Helper()
	return c.NextWithin(t, ReadTimeout)
}

// NextByOwner reads the next n responses, in whatever order they arrive, keyed by owner.
func (c *Conn) NextByOwner(t testing.TB, n int) map[uint64]wire.Response {
	t.Helper()
	got := make(map[uint64]wire.Response, n)
	for range n {
		r := c.Next(t)
		got[r.Owner] = r
	}
	return got
}

// NextWithin returns the next response, waiting at most d.
func (c *Conn) NextWithin(t testing.TB, d time.Duration) wire.Response {
	t.Helper()
	r, err := c.TryNext(d)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	return r
}

// ErrClosed is returned by TryNext when the stream ended (EOF or reset) between frames.
var ErrClosed = errors.New("connection closed by the server")

// TryNext returns the next response or why there is none within d: a timeout (test with
// os.ErrDeadlineExceeded), ErrClosed, or a structural error of the server's bytes. The
// response is a copy: it stays valid after later reads.
func (c *Conn) TryNext(d time.Duration) (wire.Response, error) {
	deadline := time.Now().Add(d)
	for {
		for c.r < c.w {
			n, done, err := c.dec.Decode(c.buf[c.r:c.w])
			c.r += n
			if err != nil {
				return wire.Response{}, fmt.Errorf("server sent a malformed frame: %w", err)
			}
			if done {
				return *c.dec.Response(), nil
			}
		}
		if err := c.fill(deadline); err != nil {
			if errors.Is(err, ErrClosed) && c.dec.Partial() {
				return wire.Response{}, fmt.Errorf("stream ended inside a response frame: %w", err)
			}
			return wire.Response{}, err
		}
	}
}

// fill reads more bytes into the buffer, at most until deadline.
func (c *Conn) fill(deadline time.Time) error {
	if c.r == c.w {
		c.r, c.w = 0, 0
	}
	if c.w == len(c.buf) {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
	c.nc.SetReadDeadline(deadline)
	n, err := c.nc.Read(c.buf[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	if isClosed(err) {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return err
}

// isClosed reports whether a read error means the peer ended the connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ReadBytes returns exactly the next n bytes of the stream, undecoded, for byte-exact checks.
// Do not mix it with a partly decoded frame.
func (c *Conn) ReadBytes(t testing.TB, n int) []byte {
	t.Helper()
	if c.dec.Partial() {
		t.Fatalf("ReadBytes inside a partly decoded frame")
	}
	deadline := time.Now().Add(ReadTimeout)
	for c.w-c.r < n {
		if err := c.fill(deadline); err != nil {
			t.Fatalf("reading %d raw bytes (have %d: %q): %v", n, c.w-c.r, c.buf[c.r:c.w], err)
		}
	}
	b := bytes.Clone(c.buf[c.r : c.r+n])
	c.r += n
	return b
}

// ExpectBytes reads len(want) raw bytes and fails unless they are want.
func (c *Conn) ExpectBytes(t testing.TB, want []byte) {
	t.Helper()
	if got := c.ReadBytes(t, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("server sent % x, want % x", got, want)
	}
}

// Expect reads the next response and fails unless it equals want (every field).
func (c *Conn) Expect(t testing.TB, want wire.Response) wire.Response {
	t.Helper()
	got := c.Next(t)
	if got != want {
		t.Fatalf("got %s, want %s", Describe(got), Describe(want))
	}
	return got
}

// ExpectOp reads the next response and fails unless it has op and owner. It returns the
// response, for its token.
func (c *Conn) ExpectOp(t testing.TB, op wire.Op, owner uint64) wire.Response {
	t.Helper()
	got := c.Next(t)
	if got.Op != op || got.Owner != owner {
		t.Fatalf("got %s, want %v with owner %d", Describe(got), op, owner)
	}
	return got
}

// ExpectGrant reads the next response, fails unless it is A for owner, and returns its token.
func (c *Conn) ExpectGrant(t testing.TB, owner uint64) uint64 {
	t.Helper()
	r := c.ExpectOp(t, wire.OpAcquire, owner)
	if r.Token == 0 {
		t.Fatalf("A for owner %d carries token 0; tokens are never 0", owner)
	}
	return r.Token
}

// Grant sends an acquire of key (wait seconds, lease seconds) that must be granted, and
// returns its token.
func (c *Conn) Grant(t testing.TB, owner uint64, wait uint8, lease uint16, key string) uint64 {
	t.Helper()
	c.Send(t, Acquire(owner, wait, lease, key))
	return c.ExpectGrant(t, owner)
}

// ExpectError reads the next response and fails unless it is E with owner and reason.
func (c *Conn) ExpectError(t testing.TB, owner uint64, reason wire.Reason) {
	t.Helper()
	c.Expect(t, wire.Response{Op: wire.OpError, Owner: owner, Reason: reason})
}

// ExpectClosed fails unless the server ends the stream (EOF or reset) within ReadTimeout
// without sending another frame. On success it closes c too.
func (c *Conn) ExpectClosed(t testing.TB) {
	t.Helper()
	c.ExpectClosedWithin(t, ReadTimeout)
}

// ExpectClosedWithin is ExpectClosed with its own bound.
func (c *Conn) ExpectClosedWithin(t testing.TB, d time.Duration) {
	t.Helper()
	r, err := c.TryNext(d)
	switch {
	case err == nil:
		t.Fatalf("server sent %s; want the connection closed", Describe(r))
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("connection still open after %v; want it closed", d)
	case !errors.Is(err, ErrClosed) || c.dec.Partial():
		t.Fatalf("want the connection closed between frames: %v", err)
	}
	c.Close()
}

// ExpectErrorAndClose reads E with owner and reason, then expects the connection to close:
// the handling of section 5 for the reasons that close.
func (c *Conn) ExpectErrorAndClose(t testing.TB, owner uint64, reason wire.Reason) {
	t.Helper()
	c.ExpectError(t, owner, reason)
	c.ExpectClosed(t)
}

// ExpectSilent fails if a frame arrives or the connection ends within d.
func (c *Conn) ExpectSilent(t testing.TB, d time.Duration) {
	t.Helper()
	r, err := c.TryNext(d)
	switch {
	case err == nil:
		t.Fatalf("server sent %s; want nothing for %v", Describe(r), d)
	case !errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("want nothing for %v: %v", d, err)
	}
}

// Alive checks that the connection still answers: a ping with owner gets its pong.
func (c *Conn) Alive(t testing.TB, owner uint64) {
	t.Helper()
	c.Send(t, Ping(owner))
	c.Expect(t, wire.Response{Op: wire.OpPing, Owner: owner})
}

// Describe renders a response for failure messages.
func Describe(r wire.Response) string {
	switch r.Op {
	case wire.OpAcquire:
		return fmt.Sprintf("A(owner=%d token=%d)", r.Owner, r.Token)
	case wire.OpError:
		return fmt.Sprintf("E(owner=%d reason=%s)", r.Owner, r.Reason)
	case wire.OpHello:
		return fmt.Sprintf("H(version=%d flags=%#02x nonce=%x)", r.Hello.Version, r.Hello.Flags, r.Hello.Nonce)
	case wire.OpProof:
		return fmt.Sprintf("V(%x)", r.Proof)
	}
	return fmt.Sprintf("%v(owner=%d)", r.Op, r.Owner)
}
