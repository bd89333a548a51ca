package clustertest

import (
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that stands in for a slow or faulty network where the
// kernel has no netem: every connection made to its address is carried to the target, each
// direction by its own pump, with a delay, a bandwidth cap, a stall and resets that the test
// changes while connections are open. Bytes keep their order (a chunk is never sent before
// the one read ahead of it, whatever the jitter).
//
// Direction: Down is what the dialer sends (toward the target), Up what the target answers.
type Proxy struct {
	Addr   string // where to dial it
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns map[*proxyConn]bool
	cfg   [2]Shape // by direction
	wake  chan struct{}
	done  bool
	wg    sync.WaitGroup
}

// Directions of a Proxy's connections.
const (
	Down = 0 // from the dialer to the target
	Up   = 1 // from the target back to the dialer
)

// Shape is what one direction does to the bytes it carries. The zero Shape passes them on
// at once.
type Shape struct {
	Delay  time.Duration // every chunk waits this long, plus up to Jitter more
	Jitter time.Duration
	// Rate caps the bytes per second, per connection (0: no cap).
	Rate int
	// Stall stops the direction: nothing more is read from its source (so the sender's
	// buffers fill and it blocks, as on a link that lost its route) until Stall is cleared.
	Stall bool
}

type proxyConn struct {
	a, b *net.TCPConn
	left int // pumps still running; guarded by Proxy.mu
}

// StartProxy listens on 127.0.0.1 and carries connections to target until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]bool{}, wake: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// ListenProxy is StartProxy on a given loopback address (a port from FreePorts), for a
// proxy whose address must be known before its target runs.
func ListenProxy(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxy listen %s: %v", addr, err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]bool{}, wake: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Set changes direction dir of every connection, open and future.
func (p *Proxy) Set(dir int, s Shape) {
	p.mu.Lock()
	p.cfg[dir] = s
	close(p.wake) // pumps waiting on a stall or a delay look again
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// Shape returns direction dir's shape.
func (p *Proxy) Shape(dir int) Shape {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg[dir]
}

// Reset ends every open connection with a TCP reset on both sides; new ones are carried as
// before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*proxyConn]bool{}
	p.mu.Unlock()
	for c := range conns {
		for _, s := range []*net.TCPConn{c.a, c.b} {
			_ = s.SetLinger(0)
			_ = s.Close()
		}
	}
	return len(conns)
}

// Close stops accepting, resets what is open and waits for the pumps.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return
	}
	p.done = true
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		t, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pc := &proxyConn{a: c.(*net.TCPConn), b: t.(*net.TCPConn), left: 2}
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			_ = c.Close()
			_ = t.Close()
			return
		}
		p.conns[pc] = true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(pc, Down, pc.a, pc.b)
		go p.pump(pc, Up, pc.b, pc.a)
	}
}

// chunk is bytes read and when they may be written.
type chunk struct {
	b  []byte
	at time.Time
}

// pump carries one direction: a reader that stamps each chunk with its release time, and a
// writer that sends them in order at those times, within the rate.
func (p *Proxy) pump(pc *proxyConn, dir int, from, to *net.TCPConn) {
	defer p.wg.Done()
	q := make(chan chunk, 64) // bounded: a slow writer stops the reader
	go func() {
		defer close(q)
		last := time.Time{}
		for {
			if !p.waitUnstalled(dir) {
				return
			}
			buf := make([]byte, 16<<10)
			n, err := from.Read(buf)
			if n > 0 {
				if !p.waitUnstalled(dir) { // a stall set while the read waited holds its bytes
					return
				}
				s := p.Shape(dir)
				at := time.Now().Add(s.Delay)
				if s.Jitter > 0 {
					at = at.Add(rand.N(s.Jitter))
				}
				if at.Before(last) {
					at = last // never ahead of the chunk before it
				}
				last = at
				q <- chunk{b: buf[:n], at: at}
			}
			if err != nil {
				return
			}
		}
	}()
	ok := true
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if ok = p.write(dir, to, c.b); !ok {
			break
		}
	}
	if ok {
		_ = to.CloseWrite() // the source ended: pass the end on
	} else {
		_ = from.Close() // the reader goroutine ends with it
		for range q {
		}
	}
	p.ended(pc, !ok)
}

// write sends b within direction dir's rate.
func (p *Proxy) write(dir int, to *net.TCPConn, b []byte) bool {
	for len(b) > 0 {
		n := len(b)
		if r := p.Shape(dir).Rate; r > 0 {
			n = min(n, max(r/20, 1)) // a twentieth of a second's worth at a time
			time.Sleep(time.Duration(n) * time.Second / time.Duration(r))
		}
		if _, err := to.Write(b[:n]); err != nil {
			return false
		}
		b = b[n:]
	}
	return true
}

// waitUnstalled returns once direction dir is not stalled (true), or the proxy closed.
func (p *Proxy) waitUnstalled(dir int) bool {
	for {
		p.mu.Lock()
		stalled, wake, done := p.cfg[dir].Stall, p.wake, p.done
		p.mu.Unlock()
		if done {
			return false
		}
		if !stalled {
			return true
		}
		<-wake
	}
}

// ended counts one of pc's pumps out: once both are (or one failed to write), both sockets
// close and pc is forgotten.
func (p *Proxy) ended(pc *proxyConn, failed bool) {
	p.mu.Lock()
	pc.left--
	last := pc.left == 0 || failed
	if last {
		delete(p.conns, pc)
	}
	p.mu.Unlock()
	if last {
		_ = pc.a.Close()
		_ = pc.b.Close()
	}
}
