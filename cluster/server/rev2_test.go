package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Revision 2 (docs/protocol.md): negotiated by the hellos; grants are G with their age and a
// holder extends with L. A latch/1 hello gets latch/1, byte for byte.

// revised makes a handshake that offers revision 2 and switches c to what the server echoed,
// which it returns.
func revised(t *testing.T, c *wiretest.Conn, offer uint8) uint8 {
	t.Helper()
	c.Send(t, wiretest.Hello(wire.Version, offer, nonce(t)))
	h := c.Next(t)
	if h.Op != wire.OpHello {
		t.Fatalf("got %s, want the server's H", wiretest.Describe(h))
	}
	revs, err := wire.AcceptFlags(offer&wire.OfferFlags, h.Hello.Flags)
	if err != nil {
		t.Fatalf("server hello flags %#x for offer %#x: %v", h.Hello.Flags, offer, err)
	}
	c.SetFlags(revs)
	return revs
}

func TestRevision2GrantsCarryTheirAgeAndExtendWorks(t *testing.T) {
	ts := startServer(t)
	c := wiretest.Dial(t, ts.addr)
	if revs := revised(t, c, wire.FlagLeases); revs != wire.FlagLeases {
		t.Fatalf("revisions in force %#x, want FlagLeases", revs)
	}
	g := c.Do(t, wiretest.Acquire(1, 0, 1, "k"))
	if g.Op != wire.OpGranted || g.Owner != 1 || g.Token == 0 {
		t.Fatalf("grant on a revised connection: %s, want G", wiretest.Describe(g))
	}
	if g.Age > 1000 {
		t.Fatalf("immediate grant age %d ms: more than the whole test took", g.Age)
	}
	// A waiter behind the 1 s lease is granted after it ends: its age counts the wait.
	w := wiretest.Dial(t, ts.addr)
	revised(t, w, wire.FlagLeases)
	start := time.Now()
	got := w.Do(t, wiretest.Acquire(2, 30, 5, "k"))
	waited := time.Since(start)
	if got.Op != wire.OpGranted || got.Token <= g.Token {
		t.Fatalf("waiter got %s, want G with a later token", wiretest.Describe(got))
	}
	if got.Age < 500 || time.Duration(got.Age)*time.Millisecond > waited {
		t.Fatalf("waiter's age %d ms after %v on the client: want the queueing time, at most what the client saw", got.Age, waited)
	}
	// Extend: L for the holder, N for another token or the old one, E bad_range for lease 0
	// (the connection stays).
	w.Send(t, wiretest.Extend(3, got.Token, 60, "k"))
	w.Expect(t, resp(wire.OpExtend, 3))
	w.Send(t, wiretest.Extend(4, g.Token, 60, "k"))
	w.Expect(t, resp(wire.OpNotHeld, 4))
	w.Send(t, wiretest.Extend(5, got.Token, 0, "k"))
	w.Expect(t, errResp(5, wire.ReasonBadRange))
	w.Send(t, wiretest.Release(6, got.Token, "k"))
	w.Expect(t, resp(wire.OpRelease, 6))
	w.Send(t, wiretest.Extend(7, got.Token, 60, "k"))
	w.Expect(t, resp(wire.OpNotHeld, 7))
}

// A hello without the offer is latch/1 on the same server: A, and an L is an unknown op.
func TestLatch1HelloGetsLatch1(t *testing.T) {
	ts := startServer(t)
	for i, flags := range []uint8{0, 0xfc, wire.FlagAuthRequired} { // unknown bits and bit 0 are ignored
		key := fmt.Sprintf("k%d", i)
		c := wiretest.Dial(t, ts.addr)
		if revs := revised(t, c, flags); revs != 0 {
			t.Fatalf("hello flags %#x: revisions %#x in force, want none", flags, revs)
		}
		if a := c.Do(t, wiretest.Acquire(1, 0, 30, key)); a.Op != wire.OpAcquire {
			t.Fatalf("hello flags %#x: grant %s, want A", flags, wiretest.Describe(a))
		}
		c.Send(t, wiretest.Extend(2, 1, 30, key))
		c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
	}
}

// With secrets the server asks for the proof and echoes the offer in one hello (0x03); an L
// before the proof is a command before the handshake ended.
func TestRevision2WithSecret(t *testing.T) {
	ts := startServer(t, withSecrets(secretOne))
	c := wiretest.Dial(t, ts.addr)
	cn := nonce(t)
	c.Send(t, wiretest.Hello(wire.Version, wire.FlagLeases, cn))
	h := c.Next(t)
	if h.Hello.Flags != wire.FlagAuthRequired|wire.FlagLeases {
		t.Fatalf("server hello flags %#x, want 0x03", h.Hello.Flags)
	}
	c.SetFlags(wire.FlagLeases)
	c.Send(t, wiretest.Extend(9, 1, 30, "k"))
	c.ExpectErrorAndClose(t, 9, wire.ReasonAuthRequired)

	c = wiretest.Dial(t, ts.addr)
	cn = nonce(t)
	c.Send(t, wiretest.Hello(wire.Version, wire.FlagLeases, cn))
	sn := c.Next(t).Hello.Nonce
	c.SetFlags(wire.FlagLeases)
	c.Send(t, wiretest.Proof(wire.ClientProof(secretOne, cn, sn)))
	if v := c.Next(t); v.Op != wire.OpProof || v.Proof != wire.ServerProof(secretOne, cn, sn) {
		t.Fatalf("got %s, want the latch/1 proof for the same nonces", wiretest.Describe(v))
	}
	if g := c.Do(t, wiretest.Acquire(1, 0, 30, "k")); g.Op != wire.OpGranted {
		t.Fatalf("grant after the proof: %s, want G", wiretest.Describe(g))
	}
}
