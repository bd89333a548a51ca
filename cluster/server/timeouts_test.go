package server_test

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Sections 2, 3 and 6: the handshake timeout, the progress timeout of a begun frame, unlimited
// idle time between frames, and the disconnection of a client that does not read.

// Section 2: the handshake must finish within 5 s of accept, or the server closes.
func TestHandshakeTimeout(t *testing.T) {
	slow(t)
	noAuth := startServer(t)
	auth := startServer(t, withSecrets(secretOne))
	for _, tc := range []struct {
		name string
		ts   *testServer
		run  func(t *testing.T, c *wiretest.Conn)
	}{
		{"no bytes at all", noAuth, func(t *testing.T, c *wiretest.Conn) {}},
		{"hello but no proof", auth, func(t *testing.T, c *wiretest.Conn) {
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
			c.ExpectOp(t, wire.OpHello, 0)
		}},
		{"hello, proof too late", auth, func(t *testing.T, c *wiretest.Conn) {
			c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
			c.ExpectOp(t, wire.OpHello, 0)
			// Each frame is quick; the handshake as a whole is not.
			c.ExpectSilent(t, 4*time.Second)
			proof := wire.ClientProof(secretOne, c.ClientNonce, c.ServerNonce)
			time.Sleep(1500 * time.Millisecond)
			c.Write(wiretest.Proof(proof), time.Second) // the server may be gone already
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now() // accept is later, so the deadline is at least start+5s
			c := wiretest.Dial(t, tc.ts.addr)
			tc.run(t, c)
			c.ExpectClosedWithin(t, wire.HandshakeTimeout+clustertest.Bound)
			within(t, "closed", time.Since(start), wire.HandshakeTimeout, wire.HandshakeTimeout+2*clustertest.Bound)
		})
	}
	// A hello begun and never finished: the handshake deadline closes the connection. Section
	// 3's progress timeout would answer E bad_request first; either is accepted here.
	t.Run("half a hello", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		c := wiretest.Dial(t, noAuth.addr)
		c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t))[:10])
		r, err := c.TryNext(wire.HandshakeTimeout + clustertest.Bound)
		if err == nil {
			if r != errResp(0, wire.ReasonBadRequest) {
				t.Fatalf("got %s, want nothing or E bad_request owner 0", wiretest.Describe(r))
			}
			c.ExpectClosed(t)
		} else if !errors.Is(err, wiretest.ErrClosed) {
			t.Fatalf("want the connection closed: %v", err)
		}
		within(t, "closed", time.Since(start), wire.HandshakeTimeout, wire.HandshakeTimeout+2*clustertest.Bound)
	})
}

// Section 3: a frame begun must be complete within 5 s of its first byte, else E bad_request
// with owner 0, and the connection closes. The clock starts at the frame's first byte, not at
// the handshake or the previous frame.
func TestProgressTimeout(t *testing.T) {
	slow(t)
	ts := startServer(t)
	for _, tc := range []struct {
		name    string
		idle    time.Duration // between the handshake and the partial frame
		before  []wire.Response
		partial []byte
	}{
		{"half a header", 0, nil, wiretest.Acquire(5, 0, 30, "key")[:6]},
		{"owner read, key unfinished", 0, nil, wiretest.Acquire(5, 0, 30, "key")[:14]},
		{"op byte only, after idling", 1500 * time.Millisecond, nil, []byte("R")},
		{"after a complete frame in the same write", 0, []wire.Response{resp(wire.OpPing, 1)},
			wiretest.Concat(wiretest.Ping(1), wiretest.Release(6, 7, "key")[:20])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ts.dial(t)
			time.Sleep(tc.idle)
			start := time.Now()
			c.Send(t, tc.partial)
			for _, want := range tc.before {
				c.Expect(t, want)
			}
			c.Expect(t, errResp(0, wire.ReasonBadRequest))
			within(t, "E bad_request", time.Since(start), wire.ProgressTimeout, wire.ProgressTimeout+clustertest.Bound)
			c.ExpectClosed(t)
		})
	}
	// Trickling does not extend the timeout: it runs from the first byte.
	t.Run("trickled too slowly", func(t *testing.T) {
		t.Parallel()
		c := ts.dial(t)
		frame := wiretest.Acquire(8, 0, 30, "a-key-long-enough-to-trickle")
		stop, wrote := make(chan struct{}), make(chan struct{})
		start := time.Now()
		go func() { // writes only; the test goroutine reads
			defer close(wrote)
			for i := range frame {
				if c.Write(frame[i:i+1], time.Second) != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
		defer func() { close(stop); <-wrote }()
		c.Expect(t, errResp(0, wire.ReasonBadRequest))
		within(t, "E bad_request", time.Since(start), wire.ProgressTimeout, wire.ProgressTimeout+clustertest.Bound)
		c.ExpectClosed(t)
	})
}

// Section 3: idle time between frames is not limited.
func TestIdleBetweenFrames(t *testing.T) {
	slow(t)
	ts := startServer(t, withSecrets(secretOne))
	const idle = wire.ProgressTimeout + 1500*time.Millisecond
	t.Run("after the handshake", func(t *testing.T) {
		t.Parallel()
		c := ts.dial(t)
		c.ExpectSilent(t, idle)
		c.Alive(t, 1)
	})
	t.Run("after a frame", func(t *testing.T) {
		t.Parallel()
		c := ts.dial(t)
		c.Send(t, wiretest.Acquire(2, 0, 60, "k"))
		tok := c.ExpectGrant(t, 2)
		c.ExpectSilent(t, idle)
		c.Send(t, wiretest.Release(3, tok, "k"))
		c.Expect(t, resp(wire.OpRelease, 3))
	})
}

// A frame sent one byte per write is fine as long as it ends within 5 s of its first byte;
// the next frame has 5 s of its own, even when its first byte shares a write with the end of
// the previous one.
func TestTrickledFrames(t *testing.T) {
	slow(t)
	ts := startServer(t)
	c := ts.dial(t)
	const gap = 150 * time.Millisecond
	acq := wiretest.Acquire(0x0A0A, 0x0A, 0x0A0A, "trickle") // 20 bytes: ~3 s
	ping := wiretest.Ping(0x0A)                              // 10 bytes, at 2*gap: ~2.4 s
	rel := wiretest.Release(4, 1, "trickle")                 // 25 bytes: ~3.6 s
	start := time.Now()
	c.Trickle(t, acq, gap)
	if tok := c.ExpectGrant(t, 0x0A0A); tok != 1 {
		t.Fatalf("token %d, want 1", tok)
	}
	// The last byte of the ping and the first of the release in one write. Ping and release
	// together take longer than 5 s: the release's clock starts at its own first byte.
	c.Trickle(t, ping[:len(ping)-1], 2*gap)
	c.Send(t, wiretest.Concat(ping[len(ping)-1:], rel[:1]))
	c.Expect(t, resp(wire.OpPing, 0x0A))
	time.Sleep(gap)
	c.Trickle(t, rel[1:], gap)
	c.Expect(t, resp(wire.OpRelease, 4))
	if d := time.Since(start); d < wire.ProgressTimeout {
		t.Fatalf("the frames took %v together; the test needs them to outlast one progress timeout", d)
	}
}

// Section 6: a client that does not read its replies for 5 s is disconnected.
func TestWriteStallDisconnects(t *testing.T) {
	slow(t)
	ts := startServer(t)
	c := ts.dial(t)
	blocked, gone := stallServer(t, c, 60*time.Second)
	within(t, "disconnect of a client that does not read", gone.Sub(blocked), 0, wire.WriteStallTimeout+3*clustertest.Bound)
	eventually(t, 10*time.Second, "connection gone on the server", func() bool { return ts.connections(t) == 0 })
	// The server still serves others.
	ts.dial(t).Alive(t, 1)
}

// stallServer floods c with pings and never reads, until the server drops the connection or
// limit passes. It returns when its writes first blocked (the server had stopped reading) and
// when it saw the connection gone.
func stallServer(t *testing.T, c *wiretest.Conn, limit time.Duration) (blocked, gone time.Time) {
	t.Helper()
	f := newFlood(t, c, limit)
	for {
		now := time.Now()
		err := f.write(200 * time.Millisecond)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if blocked.IsZero() {
				blocked = now
			}
		default: // reset or broken pipe: the server has closed
			t.Logf("disconnected after %d bytes of pings: %v", f.sent, err)
			if blocked.IsZero() {
				t.Fatalf("disconnected before the writes ever blocked: %v", err)
			}
			return blocked, time.Now()
		}
	}
}

// floodUntilBlocked writes pings on c, never reading, until one write makes no progress for
// stuck: the server has stopped reading because its own writes to c are blocked.
func floodUntilBlocked(t *testing.T, c *wiretest.Conn, stuck, limit time.Duration) {
	t.Helper()
	f := newFlood(t, c, limit)
	for {
		err := f.write(stuck)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			return
		default:
			t.Fatalf("flood: %v", err)
		}
	}
}

// flood writes pings without reading, bounded in time and bytes. Socket buffers are left as
// they are: shrinking SO_RCVBUF on loopback (64 KiB MTU) makes the kernel drop segments and
// back off for many seconds, which tests nothing.
type flood struct {
	t        *testing.T
	nc       net.Conn
	chunk    []byte
	off      int
	sent     int
	deadline time.Time
}

// maxFlood bounds the bytes of one flood, whatever the socket buffers hold (about 10 MB of
// pings are enough on Linux defaults).
const maxFlood = 256 << 20

func newFlood(t *testing.T, c *wiretest.Conn, limit time.Duration) *flood {
	frames := make([][]byte, 4096)
	for i := range frames {
		frames[i] = wiretest.Ping(uint64(i + 1))
	}
	return &flood{t: t, nc: c.NetConn(), chunk: wiretest.Concat(frames...), deadline: time.Now().Add(limit)}
}

// write writes the rest of the current chunk with a deadline d away. Frames are never cut:
// after a partial write the next call continues where it stopped.
func (f *flood) write(d time.Duration) error {
	f.t.Helper()
	now := time.Now()
	if now.After(f.deadline) || f.sent > maxFlood {
		f.t.Fatalf("still connected and not blocked after %d bytes of pings never read", f.sent)
	}
	f.nc.SetWriteDeadline(now.Add(d))
	n, err := f.nc.Write(f.chunk[f.off:])
	f.sent += n
	f.off = (f.off + n) % len(f.chunk)
	return err
}
