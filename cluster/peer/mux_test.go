package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// sayAndHear writes msg on c and reads it back from s, the other end.
func sayAndHear(t *testing.T, c, s net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	_ = s.SetReadDeadline(time.Now().Add(clustertest.Bound))
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}

func TestChannelSplit(t *testing.T) {
	inModes(t, func(t *testing.T, cfg Config) {
		m := listen(t, cfg)
		addr := m.Addr().String()
		for _, ch := range []byte{ChannelAdmin, ChannelRaft, ChannelForward} {
			c := dial(t, addr, ch, cfg)
			s := accept(t, m.Listener(ch))
			sayAndHear(t, c, s, "to "+channelName(ch))
			sayAndHear(t, s, c, "from "+channelName(ch))
		}
		st := settled(t, m)
		if st.Accepted != 3 || st.Rejected+st.Failed+st.Shed+st.Dropped != 0 {
			t.Fatalf("stats %+v, want 3 accepted and nothing else", st)
		}
		for _, ch := range channels {
			if n := queued(m, ch); n != 0 {
				t.Errorf("%s channel holds %d connections, want 0", channelName(ch), n)
			}
		}
	}, "plain", "secret")
}

// Many dialers on every channel at once: each connection lands on the channel it asked for.
// Run with -race -count=20.
func TestChannelSplitConcurrent(t *testing.T) {
	const perChannel = 20
	cfg := testConfig(t, secretOld, secretNew)
	m := listen(t, cfg)
	addr := m.Addr().String()

	var wg sync.WaitGroup
	errs := make(chan error, 2*len(channels)*perChannel)
	for _, ch := range channels {
		l := m.Listener(ch)
		wg.Add(1)
		go func() { // one acceptor per channel: reads a line naming the channel
			defer wg.Done()
			for range perChannel {
				s, err := l.Accept()
				if err != nil {
					errs <- err
					return
				}
				buf := make([]byte, 1)
				_ = s.SetReadDeadline(time.Now().Add(clustertest.Bound))
				if _, err := io.ReadFull(s, buf); err != nil {
					errs <- err
				} else if buf[0] != ch {
					errs <- fmt.Errorf("%s listener got a connection for %s", channelName(ch), channelName(buf[0]))
				}
				_ = s.Close()
			}
		}()
		for range perChannel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
				defer cancel()
				c, err := Dial(ctx, addr, ch, cfg)
				if err != nil {
					errs <- err
					return
				}
				defer func() { _ = c.Close() }()
				if _, err := c.Write([]byte{ch}); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := settled(t, m); st.Accepted != uint64(len(channels)*perChannel) {
		t.Fatalf("stats %+v, want %d accepted", st, len(channels)*perChannel)
	}
}

func TestUnknownChannelRejected(t *testing.T) {
	inModes(t, func(t *testing.T, cfg Config) {
		m := listen(t, cfg)

		// Dial refuses before connecting.
		if err := dialErr(t, m.Addr().String(), 'z', cfg); !errors.Is(err, ErrUnknownChannel) {
			t.Fatalf("Dial('z') = %v, want ErrUnknownChannel", err)
		}

		// A hand-made dialer that sends 'z' (with a valid proof for 'z') gets the reject.
		c := rawDial(t, m.Addr().String())
		h := readHello(t, c)
		msg := []byte{'z'}
		if len(cfg.Secrets) > 0 {
			var client [nonceSize]byte
			p := proof(secretNew, clientLabel, 'z', nil, &client, (*[nonceSize]byte)(h[3:]))
			msg = append(append(msg, client[:]...), p[:]...)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		verdict := make([]byte, 1)
		if _, err := io.ReadFull(c, verdict); err != nil || verdict[0] != verdictReject {
			t.Fatalf("verdict %q, %v; want %q", verdict, err, verdictReject)
		}
		expectClosed(t, c, clustertest.Bound)
		if st := settled(t, m); st.Rejected != 1 || st.Accepted != 0 {
			t.Fatalf("stats %+v, want 1 rejected, 0 accepted", st)
		}
	}, "plain", "secret")
}

func TestClosedChannelRejectsOthersServe(t *testing.T) {
	cfg := testConfig(t, secretNew)
	m := listen(t, cfg)
	addr := m.Addr().String()
	if err := m.Listener(ChannelAdmin).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Listener(ChannelAdmin).Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed channel = %v, want net.ErrClosed", err)
	}
	if err := dialErr(t, addr, ChannelAdmin, cfg); !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial(admin) = %v, want ErrRejected", err)
	}
	c := dial(t, addr, ChannelRaft, cfg)
	sayAndHear(t, c, accept(t, m.Listener(ChannelRaft)), "still here")
}

func TestListenerOfUnknownChannelPanics(t *testing.T) {
	m := listen(t, testConfig(t))
	defer func() {
		if recover() == nil {
			t.Fatal("Listener('z') did not panic")
		}
	}()
	m.Listener('z')
}

// A connection that sends nothing is closed at the handshake deadline, with and without TLS,
// and gives back its slot.
func TestSilentConnectionClosedAtDeadline(t *testing.T) {
	inModes(t, func(t *testing.T, cfg Config) {
		t.Parallel()
		const timeout = 300 * time.Millisecond
		cfg.HandshakeTimeout = timeout
		m := listen(t, cfg)
		c := rawDial(t, m.Addr().String())
		if cfg.TLS == nil {
			readHello(t, c) // the listener speaks first; then waits for the channel byte
		}
		start := time.Now()
		expectClosed(t, c, timeout+clustertest.Bound)
		if d := time.Since(start); d > timeout+clustertest.Bound {
			t.Fatalf("closed after %v", d)
		}
		if st := settled(t, m); st.Failed != 1 || st.Accepted != 0 {
			t.Fatalf("stats %+v, want 1 failed", st)
		}
	}, "plain", "secret", "tls")
}

// A connection that sends its channel byte but not its proof is closed at the deadline too.
func TestPartialProofClosedAtDeadline(t *testing.T) {
	cfg := testConfig(t, secretNew)
	cfg.HandshakeTimeout = 300 * time.Millisecond
	m := listen(t, cfg)
	c := rawDial(t, m.Addr().String())
	readHello(t, c)
	if _, err := c.Write([]byte{ChannelRaft, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c, clustertest.Bound)
	if st := settled(t, m); st.Failed != 1 || queued(m, ChannelRaft) != 0 {
		t.Fatalf("stats %+v, queued %d; want 1 failed, none queued", st, queued(m, ChannelRaft))
	}
}

// A slow or silent peer does not hold up the accept loop: others are served meanwhile.
func TestSlowPeerDoesNotBlockOthers(t *testing.T) {
	cfg := testConfig(t, secretNew)
	cfg.HandshakeTimeout = time.Minute // the silent ones outlive the test
	cfg.FirstByteTimeout = time.Minute
	m := listen(t, cfg)
	addr := m.Addr().String()
	for range 5 {
		readHello(t, rawDial(t, addr))
	}
	start := time.Now()
	c := dial(t, addr, ChannelForward, cfg)
	sayAndHear(t, c, accept(t, m.Listener(ChannelForward)), "served")
	if d := time.Since(start); d > clustertest.Bound {
		t.Fatalf("served after %v", d)
	}
	eventually(t, "the 5 silent ones, and only they, still in the handshake", func() bool {
		st := m.Stats()
		return st.Handshaking == 5 && st.Accepted == 1
	})
}

// Over MaxHandshakes, a newcomer takes the slot of the oldest silent connection; when every
// connection in the handshake has spoken (and is not stale), the newcomer is closed at once.
func TestHandshakeCap(t *testing.T) {
	cfg := testConfig(t, secretNew)
	cfg.MaxHandshakes = 2
	cfg.HandshakeTimeout = time.Minute
	cfg.FirstByteTimeout = time.Minute
	m := listen(t, cfg)
	addr := m.Addr().String()

	first := rawDial(t, addr)
	readHello(t, first)
	second := rawDial(t, addr)
	readHello(t, second)

	third := rawDial(t, addr)
	readHello(t, third) // let in: the oldest silent one made room
	expectClosed(t, first, clustertest.Bound)
	eventually(t, "one evicted", func() bool { return m.Stats().Evicted == 1 })

	// second and third speak (a channel byte, no proof): nothing can make room now.
	for _, c := range []net.Conn{second, third} {
		if _, err := c.Write([]byte{ChannelRaft}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both have spoken", func() bool {
		return spokenCount(m) == 2
	})
	over := rawDial(t, addr)
	expectClosed(t, over, clustertest.Bound) // no hello: closed before the handshake
	eventually(t, "one shed", func() bool { return m.Stats().Shed == 1 })
	if st := m.Stats(); st.Evicted != 1 {
		t.Fatalf("stats %+v, want 1 shed and 1 evicted", st)
	}

	_ = second.Close()
	eventually(t, "a slot freed", func() bool { return m.tab.size() == 1 })
	c := dial(t, addr, ChannelAdmin, cfg)
	sayAndHear(t, c, accept(t, m.Listener(ChannelAdmin)), "after the flood")
}

// A channel nobody accepts on holds channelBacklog connections; the next is dropped at its
// deadline; the held ones are still delivered.
func TestBacklogFullDrops(t *testing.T) {
	cfg := testConfig(t)
	cfg.HandshakeTimeout = 300 * time.Millisecond
	m := listen(t, cfg)
	addr := m.Addr().String()
	for range channelBacklog + 1 {
		dial(t, addr, ChannelAdmin, cfg)
	}
	eventually(t, "one dropped", func() bool { return m.Stats().Dropped == 1 })
	if st := settled(t, m); st.Accepted != channelBacklog {
		t.Fatalf("stats %+v, want %d accepted", st, channelBacklog)
	}
	for range channelBacklog {
		accept(t, m.Listener(ChannelAdmin))
	}
}

// Close ends Accept, the handshakes in progress and the queued connections at once, and
// leaves no goroutine behind (TestMain checks).
func TestCloseEndsEverything(t *testing.T) {
	cfg := testConfig(t, secretNew)
	cfg.HandshakeTimeout = time.Minute
	cfg.FirstByteTimeout = time.Minute
	m, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := m.Addr().String()
	silent := rawDial(t, addr)
	readHello(t, silent)
	queuedConn := dial(t, addr, ChannelForward, cfg) // authenticated, never accepted
	eventually(t, "one queued", func() bool { return queued(m, ChannelForward) == 1 })

	acceptErr := make(chan error, 1)
	go func() {
		_, err := m.Listener(ChannelRaft).Accept()
		acceptErr <- err
	}()

	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > clustertest.Bound {
		t.Fatalf("Close took %v", d)
	}
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(clustertest.Bound):
		t.Fatal("Accept still blocked after Close")
	}
	expectClosed(t, silent, clustertest.Bound)
	expectClosed(t, queuedConn, clustertest.Bound)
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := dialErr(t, addr, ChannelRaft, cfg); err == nil {
		t.Fatal("Dial after Close succeeded")
	}
}

func TestDialHonoursContext(t *testing.T) {
	addr := fakeListener(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }) // never says hello
	cfg := testConfig(t, secretNew)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := Dial(ctx, addr, ChannelRaft, cfg)
	if err == nil {
		_ = c.Close()
		t.Fatal("Dial succeeded against a silent listener")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > clustertest.Bound {
		t.Fatalf("Dial returned after %v", d)
	}

	// The handshake timeout bounds a dial whose context has no deadline.
	cfg.HandshakeTimeout = 200 * time.Millisecond
	if err := dialErr(t, addr, ChannelRaft, cfg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial = %v, want context.DeadlineExceeded", err)
	}
}

func TestDialNotAPeerPort(t *testing.T) {
	addr := fakeListener(t, func(c net.Conn) { _, _ = io.WriteString(c, "H\x01 this is the client port, not the peer port") })
	if err := dialErr(t, addr, ChannelRaft, testConfig(t)); !errors.Is(err, ErrNotPeerPort) {
		t.Fatalf("Dial = %v, want ErrNotPeerPort", err)
	}
}
