package server_test

import (
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// The connection limit (server.Config.MaxConns): a connection over it is answered
// E unavailable (owner 0), which section 5 makes safe to retry elsewhere, and closed.

func TestConnectionLimit(t *testing.T) {
	ts := startServer(t, withMaxConns(2))
	a, b := ts.dial(t), ts.dial(t)

	// Over the limit, before sending anything.
	c := wiretest.Dial(t, ts.addr)
	c.ExpectErrorAndClose(t, 0, wire.ReasonUnavailable)

	// Over the limit, with the hello already sent: the E must still arrive.
	d := wiretest.Dial(t, ts.addr)
	d.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
	d.ExpectErrorAndClose(t, 0, wire.ReasonUnavailable)

	// A connection that has not finished its handshake counts too; one that has sent
	// nothing yet gives its place to a newcomer.
	a.Close()
	eventually(t, 10*time.Second, "a's slot freed", func() bool { return ts.connections(t) == 1 })
	e := wiretest.Dial(t, ts.addr) // no handshake yet, nothing sent
	eventually(t, 10*time.Second, "e counted", func() bool { return ts.connections(t) == 2 })
	f := wiretest.Dial(t, ts.addr)
	e.ExpectErrorAndClose(t, 0, wire.ReasonUnavailable)
	f.Hello(t, nil)
	f.Alive(t, 1)
	b.Alive(t, 2)

	// After one closes, a new connection is served (the slot frees once the server has
	// noticed the close: poll).
	b.Close()
	g := dialUntilServed(t, ts, 10*time.Second)
	g.Alive(t, 3)
	f.Alive(t, 4)
}

// dialUntilServed dials until the server answers the hello instead of E unavailable.
func dialUntilServed(t *testing.T, ts *testServer, within time.Duration) *wiretest.Conn {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := wiretest.Dial(t, ts.addr)
		c.Send(t, wiretest.Hello(wire.Version, 0, nonce(t)))
		r, err := c.TryNext(wiretest.ReadTimeout)
		switch {
		case err != nil:
			t.Fatalf("dial while a slot frees: %v", err)
		case r.Op == wire.OpHello:
			return c
		case r != errResp(0, wire.ReasonUnavailable):
			t.Fatalf("got %s, want H or E unavailable", wiretest.Describe(r))
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("still refused %v after a connection closed", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Refused connections do not use up slots.
func TestConnectionLimitRefusalsDoNotCount(t *testing.T) {
	ts := startServer(t, withMaxConns(1))
	a := ts.dial(t)
	for range 20 {
		c := wiretest.Dial(t, ts.addr)
		c.ExpectErrorAndClose(t, 0, wire.ReasonUnavailable)
		c.Close()
	}
	a.Close()
	dialUntilServed(t, ts, 10*time.Second).Alive(t, 1)
	if n := ts.connections(t); n != 1 {
		t.Fatalf("%v connections counted, want 1", n)
	}
}
