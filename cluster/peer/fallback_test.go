package peer

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/latchd/latch/cluster/clustertest"
)

// dialFallback is DialFallback from a follower's side (ChannelForwardLeases, else
// ChannelForward) within slack.
func dialFallback(t *testing.T, addr string, cfg Config) (net.Conn, byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()
	c, ch, err := DialFallback(ctx, addr, ChannelForwardLeases, ChannelForward, cfg)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, ch, err
}

// listenerWithout serves the listener's side of the handshake as a latch that does not know
// channel missing does: serveHandshake is the code every version so far runs, and a channel
// it refuses goes through the same steps as one it does not know (the message and the proof
// are read, the proof is checked, then 'n' and close). It counts the connections it took
// and the ones it refused.
func listenerWithout(t *testing.T, missing byte, secrets ...[]byte) (addr string, took, refused *atomic.Int32) {
	t.Helper()
	took, refused = &atomic.Int32{}, &atomic.Int32{}
	addr = fakeListener(t, func(c net.Conn) {
		ch, _, err := serveHandshake(c, secrets, func(ch byte) bool { return ch != missing })
		if err != nil {
			refused.Add(1)
			return
		}
		took.Add(1)
		// Echo one byte naming the channel, so the dialer sees which one it reached.
		_, _ = c.Write([]byte{ch})
		_, _ = io.Copy(io.Discard, c)
	})
	return addr, took, refused
}

// A listener of this version takes the revised forward channel: no fallback.
func TestDialFallbackTakesTheRevisedChannel(t *testing.T) {
	inModes(t, func(t *testing.T, cfg Config) {
		m := listen(t, cfg)
		cfg.ID, cfg.Advertise = "n2", "127.0.0.1:7002"
		c, ch, err := dialFallback(t, m.Addr().String(), cfg)
		if err != nil || ch != ChannelForwardLeases {
			t.Fatalf("DialFallback = channel %s, %v; want %s", channelName(ch), err, channelName(ChannelForwardLeases))
		}
		sayAndHear(t, c, accept(t, m.Listener(ChannelForwardLeases)), "revised")
		if st := settled(t, m); st.Accepted != 1 || st.Rejected != 0 {
			t.Fatalf("stats %+v, want 1 accepted and none rejected", st)
		}
	}, "plain", "secret", "tls")
}

// A listener that refuses the revised channel (an older latch, or this one with that
// channel closed) gets the latch/1 forward channel, with or without identities and secrets.
// With an identity stated the refusal takes two dials (version 2, then Dial's own fallback
// to version 1), then the fallback channel is dialled with the identity again.
func TestDialFallbackOnRefusal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		secrets  [][]byte
		identity bool
	}{
		{"plain", nil, false},
		{"plain, identity", nil, true},
		{"secret", [][]byte{secretNew}, false},
		{"secret, identity", [][]byte{secretNew}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, took, refused := listenerWithout(t, ChannelForwardLeases, tc.secrets...)
			cfg := testConfig(t, tc.secrets...)
			wantRefused := int32(1)
			if tc.identity {
				cfg.ID, cfg.Advertise = "n2", "127.0.0.1:7002"
				wantRefused = 2
			}
			c, ch, err := dialFallback(t, addr, cfg)
			if err != nil || ch != ChannelForward {
				t.Fatalf("DialFallback = channel %s, %v; want %s", channelName(ch), err, channelName(ChannelForward))
			}
			got := make([]byte, 1)
			if _, err := io.ReadFull(c, got); err != nil || got[0] != ChannelForward {
				t.Fatalf("the listener says it serves %q (%v), want %q", got, err, ChannelForward)
			}
			eventually(t, "the listener's counts", func() bool { return took.Load() == 1 && refused.Load() == wantRefused })
		})
	}

	// The real Mux: a closed revised channel is refused like an unknown one.
	cfg := testConfig(t, secretNew)
	m := listen(t, cfg)
	_ = m.Listener(ChannelForwardLeases).Close()
	c, ch, err := dialFallback(t, m.Addr().String(), cfg)
	if err != nil || ch != ChannelForward {
		t.Fatalf("Mux with the revised channel closed: DialFallback = channel %s, %v; want forward", channelName(ch), err)
	}
	sayAndHear(t, c, accept(t, m.Listener(ChannelForward)), "latch/1")
}

// Anything but the reject verdict is an error of the dial, never a reason to take the
// fallback channel: a listener that closes without a verdict, one that answers no verdict
// byte, one whose server proof is wrong, a port with nothing behind it.
func TestDialFallbackNotOnOtherFailures(t *testing.T) {
	hello := func(c net.Conn, secret bool) {
		h := make([]byte, helloSize)
		h[0], h[1] = helloMagic, helloVersion
		if secret {
			h[2] = flagSecret
		}
		_, _ = rand.Read(h[3:])
		_, _ = c.Write(h)
	}
	readMsg := func(c net.Conn, secret bool) {
		n := 1
		if secret {
			n += proofMsgSize
		}
		_, _ = io.ReadFull(c, make([]byte, n))
	}
	for _, tc := range []struct {
		name   string
		secret bool
		serve  func(c net.Conn)
		want   error // nil: any error
	}{
		{"closes without a verdict", false, func(c net.Conn) { hello(c, false); readMsg(c, false) }, io.EOF},
		{"answers no verdict byte", false, func(c net.Conn) { hello(c, false); readMsg(c, false); _, _ = c.Write([]byte{'?'}) }, ErrNotPeerPort},
		{"wrong server proof", true, func(c net.Conn) {
			hello(c, true)
			readMsg(c, true)
			_, _ = c.Write(append([]byte{verdictAccept}, make([]byte, proofSize)...))
		}, ErrServerProof},
		{"no peer port", false, func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}, ErrNotPeerPort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int32
			addr := fakeListener(t, func(c net.Conn) { conns.Add(1); tc.serve(c) })
			var secrets [][]byte
			if tc.secret {
				secrets = [][]byte{secretNew}
			}
			_, ch, err := dialFallback(t, addr, testConfig(t, secrets...))
			if err == nil || ch != ChannelForwardLeases || errors.Is(err, ErrRejected) {
				t.Fatalf("DialFallback = channel %s, %v; want an error of the revised channel", channelName(ch), err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("DialFallback: %v, want %v", err, tc.want)
			}
			if n := conns.Load(); n != 1 {
				t.Fatalf("the listener saw %d connections, want 1 (no fallback dial)", n)
			}
		})
	}

	t.Run("nothing listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		if _, ch, err := dialFallback(t, addr, testConfig(t)); err == nil || ch != ChannelForwardLeases {
			t.Fatalf("DialFallback to a closed port = channel %s, %v; want an error of the revised channel", channelName(ch), err)
		}
	})
}

// A dialer whose proof the listener refuses falls back (the reject says nothing more), is
// refused again, and gets an error that names both channels.
func TestDialFallbackBothRefused(t *testing.T) {
	m := listen(t, testConfig(t, secretNew))
	_, ch, err := dialFallback(t, m.Addr().String(), testConfig(t, secretWrong))
	if !errors.Is(err, ErrRejected) || ch != ChannelForward {
		t.Fatalf("DialFallback with a wrong secret = channel %s, %v; want ErrRejected on the fallback", channelName(ch), err)
	}
	if st := settled(t, m); st.Rejected != 2 || st.Accepted != 0 {
		t.Fatalf("stats %+v, want 2 rejected", st)
	}
}
