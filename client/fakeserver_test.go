package client

// A scripted fake latch server, for what a real server will not do on demand (answer late,
// answer out of order, hang, lie in its proof), and a recording proxy in front of a real
// server, to see exactly which frames the client sent.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
)

// fakeServer accepts connections on 127.0.0.1, makes the server side of the handshake as its
// options say, and hands each handshaken connection to the test through next.
type fakeServer struct {
	ln   net.Listener
	addr string

	secret    []byte        // asks for auth and checks proofs with it; nil: no auth asked
	leases    bool          // implements revision 2: echoes the client's wire.FlagLeases
	echo      uint8         // offer bits its hello sets whatever the client offered (a broken server)
	badProof  bool          // answer the client's proof with a wrong server proof
	helloE    wire.Reason   // answer the hello with E of this reason, and close
	gate      chan struct{} // if non-nil, the server hello waits until it is closed
	tls       *tls.Config   // if non-nil, connections are TLS
	conns     chan *fakeConn
	accepted  atomic.Int32
	handshook atomic.Int32
	failHello atomic.Int32 // connections left to fail in the handshake

	mu   sync.Mutex
	all  []*fakeConn
	wg   sync.WaitGroup
	done chan struct{}
}

type fakeOption func(*fakeServer)

func withFakeSecret(s []byte) fakeOption      { return func(f *fakeServer) { f.secret = s } }
func withBadProof() fakeOption                { return func(f *fakeServer) { f.badProof = true } }
func withHelloError(r wire.Reason) fakeOption { return func(f *fakeServer) { f.helloE = r } }
func withGate(g chan struct{}) fakeOption     { return func(f *fakeServer) { f.gate = g } }
func withTLS(c *tls.Config) fakeOption        { return func(f *fakeServer) { f.tls = c } }
func withAddr(addr string) fakeOption         { return func(f *fakeServer) { f.addr = addr } }

// withLeases makes the server implement revision 2: it echoes an offer of wire.FlagLeases and
// then speaks the revision on that connection (fakeConn.leases).
func withLeases() fakeOption { return func(f *fakeServer) { f.leases = true } }

// withEcho makes the server's hello set these offer bits whether or not the client offered
// them, as a broken server would.
func withEcho(flags uint8) fakeOption { return func(f *fakeServer) { f.echo = flags } }

// withFailedHandshakes makes the first n connections end right after the client's hello.
func withFailedHandshakes(n int32) fakeOption { return func(f *fakeServer) { f.failHello.Store(n) } }

func newFakeServer(t testing.TB, opts ...fakeOption) *fakeServer {
	t.Helper()
	fs := &fakeServer{addr: "127.0.0.1:0", conns: make(chan *fakeConn, 64), done: make(chan struct{})}
	for _, o := range opts {
		o(fs)
	}
	ln, err := net.Listen("tcp", fs.addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	fs.ln, fs.addr = ln, ln.Addr().String()
	if fs.tls != nil {
		fs.ln = tls.NewListener(ln, fs.tls)
	}
	serve(fs.ln, &fs.wg, fs.accept)
	t.Cleanup(fs.close)
	return fs
}

// serve accepts connections on ln until it is closed, in a goroutine counted in wg, and
// hands each to accept.
func serve(ln net.Listener, wg *sync.WaitGroup, accept func(net.Conn)) {
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accept(nc)
		}
	})
}

// accept handshakes nc in its own goroutine.
func (fs *fakeServer) accept(nc net.Conn) {
	fs.accepted.Add(1)
	fc := &fakeConn{nc: nc, dec: wire.NewRequestDecoder(), buf: make([]byte, 4096)}
	fs.mu.Lock()
	fs.all = append(fs.all, fc)
	fs.mu.Unlock()
	fs.wg.Go(func() {
		if err := fs.handshake(fc); err != nil {
			nc.Close()
			return
		}
		fs.handshook.Add(1)
		fs.conns <- fc
	})
}

func (fs *fakeServer) handshake(fc *fakeConn) error {
	h, err := fc.read(clustertest.Bound)
	if err != nil {
		return err
	}
	// A client sets no bit but its offers (docs/protocol.md section 8).
	if h.Op != wire.OpHello || h.Hello.Version != wire.Version || h.Hello.Flags&^wire.OfferFlags != 0 {
		return fmt.Errorf("bad client hello %+v", h)
	}
	fc.clientHello = h
	if fs.failHello.Add(-1) >= 0 {
		return errors.New("handshake failure injected")
	}
	if fs.gate != nil {
		select {
		case <-fs.gate:
		case <-fs.done:
			return errors.New("closed")
		}
	}
	if fs.helloE != "" {
		fc.sendErr(wire.Response{Op: wire.OpError, Reason: fs.helloE})
		return errors.New("refused")
	}
	sn, _ := wire.NewNonce()
	hello := wire.Response{Op: wire.OpHello, Hello: wire.Hello{Version: wire.Version, Nonce: sn}}
	var supported uint8
	if fs.leases {
		supported = wire.FlagLeases
	}
	echo := wire.EchoFlags(h.Hello.Flags, supported) | fs.echo
	hello.Hello.Flags = echo
	if fs.secret != nil {
		hello.Hello.Flags |= wire.FlagAuthRequired
	}
	fc.dec.SetFlags(echo) // between frames, once the hello is decided
	fc.leases = echo&wire.FlagLeases != 0
	if err := fc.sendErr(hello); err != nil || fs.secret == nil {
		return err
	}
	v, err := fc.read(clustertest.Bound)
	if err != nil {
		return err
	}
	if _, ok := wire.MatchClientProof([][]byte{fs.secret}, h.Hello.Nonce, sn, v.Proof); v.Op != wire.OpProof || !ok {
		fc.sendErr(wire.Response{Op: wire.OpError, Reason: wire.ReasonAuthFailed})
		return errors.New("auth failed")
	}
	p := wire.ServerProof(fs.secret, h.Hello.Nonce, sn)
	if fs.badProof {
		p[0] ^= 1
	}
	return fc.sendErr(wire.Response{Op: wire.OpProof, Proof: p})
}

// next returns the next handshaken connection.
func (fs *fakeServer) next(t *testing.T) *fakeConn {
	t.Helper()
	select {
	case fc := <-fs.conns:
		return fc
	case <-time.After(clustertest.Bound):
		t.Fatalf("fake server %s: no connection within %v", fs.addr, clustertest.Bound)
		return nil
	}
}

func (fs *fakeServer) close() {
	close(fs.done)
	fs.ln.Close()
	fs.mu.Lock()
	for _, fc := range fs.all {
		fc.nc.Close()
	}
	fs.mu.Unlock()
	fs.wg.Wait()
}

// fakeConn is the server end of one client connection, driven by the test goroutine.
type fakeConn struct {
	nc          net.Conn
	dec         *wire.Decoder
	buf, p      []byte
	clientHello wire.Request
	leases      bool // revision 2 is in force: grants are G, extends L
}

// read returns the next request frame (a copy) within d.
func (fc *fakeConn) read(d time.Duration) (wire.Request, error) {
	fc.nc.SetReadDeadline(time.Now().Add(d))
	for {
		for len(fc.p) > 0 {
			n, done, err := fc.dec.Decode(fc.p)
			fc.p = fc.p[n:]
			if err != nil {
				return wire.Request{}, err
			}
			if done {
				r := *fc.dec.Request()
				r.Key = append([]byte(nil), r.Key...)
				return r, nil
			}
		}
		n, err := fc.nc.Read(fc.buf)
		if n == 0 && err != nil {
			return wire.Request{}, err
		}
		fc.p = fc.buf[:n]
	}
}

// expect reads the next request and fails unless it has op.
func (fc *fakeConn) expect(t *testing.T, op wire.Op) wire.Request {
	t.Helper()
	r, err := fc.read(clustertest.Bound)
	if err != nil {
		t.Fatalf("fake server: want a %s request: %v", op, err)
	}
	if r.Op != op {
		t.Fatalf("fake server: got %s request %+v, want %s", r.Op, r, op)
	}
	return r
}

// silent fails if a request arrives within d (the connection ending is fine).
func (fc *fakeConn) silent(t *testing.T, d time.Duration) {
	t.Helper()
	r, err := fc.read(d)
	if err == nil {
		t.Fatalf("fake server: unexpected request %s %+v", r.Op, r)
	}
}

// closed fails unless the client closes the connection within d, sending nothing more.
func (fc *fakeConn) closed(t *testing.T, d time.Duration) {
	t.Helper()
	r, err := fc.read(d)
	switch {
	case err == nil:
		t.Fatalf("fake server: want the connection closed, got request %s %+v", r.Op, r)
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("fake server: connection not closed within %v", d)
	}
}

func (fc *fakeConn) sendErr(rs ...wire.Response) error {
	var b []byte
	for i := range rs {
		b = wire.AppendResponse(b, &rs[i])
	}
	fc.nc.SetWriteDeadline(time.Now().Add(clustertest.Bound))
	_, err := fc.nc.Write(b)
	return err
}

// send writes responses in one write.
func (fc *fakeConn) send(t *testing.T, rs ...wire.Response) {
	t.Helper()
	if err := fc.sendErr(rs...); err != nil {
		t.Fatalf("fake server: write: %v", err)
	}
}

// Responses by op.
func granted(owner, token uint64) wire.Response {
	return wire.Response{Op: wire.OpAcquire, Owner: owner, Token: token}
}
func short(op wire.Op, owner uint64) wire.Response { return wire.Response{Op: op, Owner: owner} }

// grantedAge is a revision 2 grant: G with the age of the request in milliseconds.
func grantedAge(owner, token uint64, age uint32) wire.Response {
	return wire.Response{Op: wire.OpGranted, Owner: owner, Token: token, Age: age}
}
func errResp(owner uint64, r wire.Reason) wire.Response {
	return wire.Response{Op: wire.OpError, Owner: owner, Reason: r}
}

// proxy forwards TCP connections to a real server and records every frame the clients send.
// While hold is open (not closed), it forwards nothing from the client.
type proxy struct {
	ln       net.Listener
	addr     string
	upstream string
	hold     chan struct{}

	mu     sync.Mutex
	frames []wire.Request
	socks  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, upstream string, hold chan struct{}) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &proxy{ln: ln, addr: ln.Addr().String(), upstream: upstream, hold: hold}
	serve(ln, &p.wg, p.accept)
	t.Cleanup(p.close)
	return p
}

// accept dials the upstream for c and copies both ways, recording c's frames.
func (p *proxy) accept(c net.Conn) {
	s, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.socks = append(p.socks, c, s)
	p.mu.Unlock()
	p.wg.Go(func() {
		io.Copy(c, s)
		c.Close()
	})
	p.wg.Go(func() {
		defer s.Close()
		if p.hold != nil {
			<-p.hold
		}
		p.record(c, s)
	})
}

// record copies c to s until either ends, decoding and recording each frame.
func (p *proxy) record(c, s net.Conn) {
	dec := wire.NewRequestDecoder()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		for b := buf[:n]; len(b) > 0; {
			m, done, derr := dec.Decode(b)
			b = b[m:]
			if derr != nil {
				break
			}
			if done {
				r := *dec.Request()
				r.Key = append([]byte(nil), r.Key...)
				if r.Op == wire.OpHello {
					// A client sends L only once the server echoed its offer; every other
					// request decodes the same with or without the revision.
					dec.SetFlags(r.Hello.Flags)
				}
				p.mu.Lock()
				p.frames = append(p.frames, r)
				p.mu.Unlock()
			}
		}
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// requests returns the frames recorded so far with one of ops.
func (p *proxy) requests(ops ...wire.Op) []wire.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []wire.Request
	for _, r := range p.frames {
		for _, op := range ops {
			if r.Op == op {
				out = append(out, r)
			}
		}
	}
	return out
}

// cut closes every connection through the proxy (new ones are still accepted).
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.socks {
		s.Close()
	}
	p.socks = nil
}

func (p *proxy) close() {
	p.ln.Close()
	if p.hold != nil {
		select {
		case <-p.hold:
		default:
			close(p.hold)
		}
	}
	p.mu.Lock()
	for _, s := range p.socks {
		s.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
