package server_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Sections 3, 4 and 5: frames, field ranges, key rules and the errors that keep the
// connection open or close it.

func TestOwnerRange(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	// owner 0: bad_owner, the connection stays.
	for _, f := range [][]byte{
		wiretest.Ping(0),
		wiretest.Acquire(0, 0, 30, "owner0"),
		wiretest.Acquire(0, 5, 30, "owner0"),
		wiretest.Release(0, 1, "owner0"),
	} {
		c.Send(t, f)
		c.ExpectError(t, 0, wire.ReasonBadOwner)
		c.Alive(t, 99)
	}
	if st := ts.node.Stats(); st.Keys != 0 || st.LastToken != 0 {
		t.Fatalf("a bad_owner acquire changed the table: %+v", st)
	}
	// 1 and 2^64-1 are valid and echoed exactly.
	for _, owner := range []uint64{1, 1<<64 - 1, 1 << 63} {
		c.Alive(t, owner)
		c.Send(t, wiretest.Acquire(owner, 0, 30, "owner-range"))
		tok := c.ExpectGrant(t, owner)
		c.Send(t, wiretest.Release(owner, tok, "owner-range"))
		c.Expect(t, resp(wire.OpRelease, owner))
	}
}

func TestWaitRange(t *testing.T) {
	ts := startServer(t)
	holder, c := ts.dial(t), ts.dial(t)
	// wait 255 on a free key: granted at once.
	c.Send(t, wiretest.Acquire(1, 255, 30, "free"))
	c.ExpectGrant(t, 1)
	// wait 0 and 255 on a held key: T at once, and a waiter.
	holder.Send(t, wiretest.Acquire(2, 0, 30, "held"))
	tok := holder.ExpectGrant(t, 2)
	c.Send(t, wiretest.Acquire(3, 0, 30, "held"))
	c.Expect(t, resp(wire.OpTimeout, 3))
	c.Send(t, wiretest.Acquire(4, 255, 30, "held"))
	ts.waitWaiters(t, 1)
	c.ExpectSilent(t, 200*time.Millisecond)
	holder.Send(t, wiretest.Release(5, tok, "held"))
	holder.Expect(t, resp(wire.OpRelease, 5))
	if tok2 := c.ExpectGrant(t, 4); tok2 <= tok {
		t.Fatalf("waiter token %d not above the released %d", tok2, tok)
	}
}

func TestLeaseRange(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	for _, tc := range []struct {
		lease uint16
		ok    bool
	}{{0, false}, {1, true}, {2, true}, {3600, true}, {3601, false}, {0x0A0A, true}, {0x0E11, false}, {65535, false}} {
		key := fmt.Sprintf("lease-%d", tc.lease)
		owner := uint64(tc.lease) + 1000
		c.Send(t, wiretest.Acquire(owner, 0, tc.lease, key))
		if !tc.ok {
			c.ExpectError(t, owner, wire.ReasonBadRange)
			c.Alive(t, owner)
			continue
		}
		tok := c.ExpectGrant(t, owner)
		c.Send(t, wiretest.Release(owner, tok, key))
		c.Expect(t, resp(wire.OpRelease, owner))
	}
	if st := ts.node.Stats(); st.LastToken != 4 {
		t.Fatalf("last token %d, want 4: bad_range acquires must not take a token", st.LastToken)
	}
	// A bad_range acquire of a held key with wait > 0 is refused, not queued.
	c.Send(t, wiretest.Acquire(1, 0, 30, "held"))
	c.ExpectGrant(t, 1)
	c.Send(t, wiretest.Acquire(2, 10, 0, "held"), wiretest.Acquire(3, 10, 3601, "held"))
	c.ExpectError(t, 2, wire.ReasonBadRange)
	c.ExpectError(t, 3, wire.ReasonBadRange)
	if st := ts.node.Stats(); st.Waiters != 0 {
		t.Fatalf("bad_range acquires were queued: %+v", st)
	}
}

// Token 0 never matches on release: N, and the lock stays held.
func TestReleaseTokenZero(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	c.Send(t, wiretest.Release(1, 0, "free"))
	c.Expect(t, resp(wire.OpNotHeld, 1))
	c.Send(t, wiretest.Acquire(2, 0, 30, "held"))
	tok := c.ExpectGrant(t, 2)
	c.Send(t, wiretest.Release(3, 0, "held"))
	c.Expect(t, resp(wire.OpNotHeld, 3))
	c.Send(t, wiretest.Release(4, tok+1, "held"))
	c.Expect(t, resp(wire.OpNotHeld, 4))
	c.Send(t, wiretest.Release(5, tok, "other-key"))
	c.Expect(t, resp(wire.OpNotHeld, 5))
	c.Send(t, wiretest.Acquire(6, 0, 30, "held"))
	c.Expect(t, resp(wire.OpTimeout, 6))
	c.Send(t, wiretest.Release(7, tok, "held"))
	c.Expect(t, resp(wire.OpRelease, 7))
	c.Send(t, wiretest.Release(8, tok, "held"))
	c.Expect(t, resp(wire.OpNotHeld, 8))
}

// keyCase is one row of section 4's key rules.
type keyCase struct {
	name string
	key  string
	ok   bool
}

func keyCases() []keyCase {
	cases := []keyCase{
		{"one byte", "k", true},
		{"empty", "", false},
		{"128 bytes", strings.Repeat("k", 128), true},
		{"129 bytes", strings.Repeat("k", 129), false},
		{"64 Cyrillic letters (128 bytes)", strings.Repeat("ж", 64), true},
		{"65 Cyrillic letters (130 bytes)", strings.Repeat("ж", 65), false},
		{"42 Korean syllables (126 bytes)", strings.Repeat("한", 42), true},
		{"43 Korean syllables (129 bytes)", strings.Repeat("한", 43), false},
		{"32 four-byte runes (128 bytes)", strings.Repeat("🔒", 32), true},
		{"127 bytes and a 2-byte rune (129 bytes)", strings.Repeat("k", 127) + "ж", false},
		{"invalid UTF-8 0xFF", "a\xffb", false},
		{"invalid UTF-8 lone continuation", "\x80", false},
		{"invalid UTF-8 truncated sequence", "ab\xd0", false},
		{"invalid UTF-8 overlong", "\xc0\xaf", false},
		{"invalid UTF-8 surrogate", "\xed\xa0\x80", false},
		{"CR inside", "a\rb", true},
		{"CR at the end", "name\r", true},
		{"CR alone", "\r", true},
		{"slash and colon", "jobs/nightly:db-1", true},
		{"NUL byte", "a\x00b", true},                // not among section 4's faults
		{"no-break space U+00A0", "a\u00a0b", true}, // whitespace means the four bytes of section 4
		{"ideographic space U+3000", "a\u3000b", true},
	}
	for _, ws := range []struct {
		name string
		b    string
	}{{"space 0x20", " "}, {"tab 0x09", "\t"}, {"VT 0x0B", "\v"}, {"FF 0x0C", "\f"}} {
		cases = append(cases,
			keyCase{ws.name + " alone", ws.b, false},
			keyCase{ws.name + " first", ws.b + "key", false},
			keyCase{ws.name + " inside", "k" + ws.b + "ey", false},
			keyCase{ws.name + " last", "key" + ws.b, false},
			keyCase{ws.name + " in a 128-byte key", strings.Repeat("k", 64) + ws.b + strings.Repeat("k", 63), false},
		)
	}
	return cases
}

func TestKeyRules(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	owner := uint64(100)
	for _, kc := range keyCases() {
		t.Run(kc.name, func(t *testing.T) {
			owner++
			acq, rel, ping := owner, owner+1<<32, owner+1<<33
			if !kc.ok {
				c.Send(t, wiretest.Acquire(acq, 0, 30, kc.key))
				c.ExpectError(t, acq, wire.ReasonBadKey)
				c.Send(t, wiretest.Acquire(acq, 5, 30, kc.key))
				c.ExpectError(t, acq, wire.ReasonBadKey)
				c.Send(t, wiretest.Release(rel, 1, kc.key))
				c.ExpectError(t, rel, wire.ReasonBadKey)
				c.Alive(t, ping)
				return
			}
			c.Send(t, wiretest.Release(rel, 1, kc.key))
			c.Expect(t, resp(wire.OpNotHeld, rel))
			c.Send(t, wiretest.Acquire(acq, 0, 30, kc.key))
			tok := c.ExpectGrant(t, acq)
			c.Send(t, wiretest.Acquire(acq, 0, 30, kc.key))
			c.Expect(t, resp(wire.OpTimeout, acq))
			c.Send(t, wiretest.Release(rel, tok, kc.key))
			c.Expect(t, resp(wire.OpRelease, rel))
		})
	}
	if st := ts.node.Stats(); st.Keys != 0 {
		t.Fatalf("%d keys left held", st.Keys)
	}
}

// The server accepts CR in a key: "name\r" is a different key than "name".
func TestKeyCRIsAnotherKey(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	c.Send(t, wiretest.Acquire(1, 0, 30, "name"))
	plain := c.ExpectGrant(t, 1)
	c.Send(t, wiretest.Acquire(2, 0, 30, "name\r"))
	withCR := c.ExpectGrant(t, 2)
	c.Send(t, wiretest.Release(3, withCR, "name"))
	c.Expect(t, resp(wire.OpNotHeld, 3))
	c.Send(t, wiretest.Release(4, plain, "name\r"))
	c.Expect(t, resp(wire.OpNotHeld, 4))
	c.Send(t, wiretest.Release(5, withCR, "name\r"))
	c.Expect(t, resp(wire.OpRelease, 5))
	c.Send(t, wiretest.Release(6, plain, "name"))
	c.Expect(t, resp(wire.OpRelease, 6))
}

// Section 5: when a frame has several faults, the first of bad_owner, bad_key, bad_range.
func TestFaultOrder(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	long := strings.Repeat("k", 129)
	for _, tc := range []struct {
		name   string
		frame  []byte
		owner  uint64
		reason wire.Reason
	}{
		{"owner 0, bad key, bad lease", wiretest.Acquire(0, 0, 0, ""), 0, wire.ReasonBadOwner},
		{"owner 0, long key, lease 3601", wiretest.Acquire(0, 7, 3601, long), 0, wire.ReasonBadOwner},
		{"owner 0, bad key", wiretest.Acquire(0, 0, 30, "a b"), 0, wire.ReasonBadOwner},
		{"owner 0, bad lease", wiretest.Acquire(0, 0, 0, "k"), 0, wire.ReasonBadOwner},
		{"bad key, bad lease", wiretest.Acquire(9, 0, 0, ""), 9, wire.ReasonBadKey},
		{"invalid UTF-8, lease 3601", wiretest.Acquire(10, 1, 3601, "\xff"), 10, wire.ReasonBadKey},
		{"release owner 0, bad key", wiretest.Release(0, 0, ""), 0, wire.ReasonBadOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Send(t, tc.frame)
			c.ExpectError(t, tc.owner, tc.reason)
			c.Alive(t, 77)
		})
	}
}

// The E frame of a staying error, byte for byte: op, owner u64, reason, LF.
func TestErrorFrameBytes(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	c.Send(t, wiretest.Acquire(0x0102030405060708, 0, 30, ""))
	c.ExpectBytes(t, []byte("E\x01\x02\x03\x04\x05\x06\x07\x08bad_key\n"))
	c.Send(t, wiretest.Ping(0x0A0B0C0D0E0F1011))
	c.ExpectBytes(t, []byte("P\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\n"))
	c.Send(t, wiretest.Acquire(3, 0, 3601, "k"))
	c.ExpectBytes(t, wiretest.Error(3, wire.ReasonBadRange))
	c.Send(t, wiretest.Acquire(0, 0, 30, "k"))
	c.ExpectBytes(t, wiretest.Error(0, wire.ReasonBadOwner))
}

// Section 3: the largest valid frame is 146 bytes; 192 bytes ending in LF are not oversized;
// 192 bytes without LF are.
func TestFrameSizeLimits(t *testing.T) {
	ts := startServer(t)
	key128 := strings.Repeat("q", 128)

	t.Run("146-byte release with a 128-byte key", func(t *testing.T) {
		c := ts.dial(t)
		c.Send(t, wiretest.Acquire(1, 0, 30, key128))
		tok := c.ExpectGrant(t, 1)
		f := wiretest.Release(2, tok, key128)
		if len(f) != 146 {
			t.Fatalf("release frame is %d bytes, want 146", len(f))
		}
		c.Send(t, f)
		c.Expect(t, resp(wire.OpRelease, 2))
	})

	for _, tc := range []struct {
		name  string
		owner uint64
		frame []byte
	}{
		{"192-byte acquire is bad_key, not oversized", 3, wiretest.Acquire(3, 0, 30, strings.Repeat("q", 192-1-11-1))},
		{"192-byte release is bad_key, not oversized", 5, wiretest.Release(5, 1, strings.Repeat("q", 192-1-16-1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t)
			if len(tc.frame) != wire.MaxFrame {
				t.Fatalf("frame is %d bytes, want %d", len(tc.frame), wire.MaxFrame)
			}
			c.Send(t, tc.frame)
			c.ExpectError(t, tc.owner, wire.ReasonBadKey)
			c.Alive(t, tc.owner+1)
		})
	}

	t.Run("193-byte acquire is oversized", func(t *testing.T) {
		c := ts.dial(t)
		f := wiretest.Acquire(7, 0, 30, strings.Repeat("q", 193-1-11-1))
		if len(f) != wire.MaxFrame+1 {
			t.Fatalf("frame is %d bytes, want %d", len(f), wire.MaxFrame+1)
		}
		c.Send(t, f)
		c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
	})

	t.Run("193-byte release is oversized", func(t *testing.T) {
		c := ts.dial(t)
		c.Send(t, wiretest.Release(8, 1, strings.Repeat("q", 193-1-16-1)))
		c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
	})

	// The frame is oversized as soon as 192 bytes have been read: no need to wait for more,
	// nor for the progress timeout.
	t.Run("192 bytes without LF are oversized at once", func(t *testing.T) {
		c := ts.dial(t)
		f := wiretest.Acquire(9, 0, 30, strings.Repeat("q", 192-1-11))
		f = f[:len(f)-1] // no LF
		if len(f) != wire.MaxFrame {
			t.Fatalf("frame is %d bytes, want %d", len(f), wire.MaxFrame)
		}
		start := time.Now()
		c.Send(t, f)
		if r := c.NextWithin(t, wire.ProgressTimeout-time.Second); r != errResp(0, wire.ReasonBadRequest) {
			t.Fatalf("got %s, want E bad_request owner 0", wiretest.Describe(r))
		}
		if d := time.Since(start); d >= wire.ProgressTimeout {
			t.Fatalf("oversized frame answered after %v: that is the progress timeout, not the size limit", d)
		}
		c.ExpectClosed(t)
	})

	t.Run("valid frames around a 192-byte one", func(t *testing.T) {
		c := ts.dial(t)
		c.Send(t, wiretest.Ping(10), wiretest.Acquire(11, 0, 30, strings.Repeat("q", 179)), wiretest.Ping(12))
		c.Expect(t, resp(wire.OpPing, 10))
		c.ExpectError(t, 11, wire.ReasonBadKey)
		c.Expect(t, resp(wire.OpPing, 12))
	})
}

// Section 3: the fixed header is read by length and may hold 0x0A anywhere.
func TestHeaderBytesLF(t *testing.T) {
	const lfs = 0x0A0A0A0A0A0A0A0A
	// The first token granted is floor+1: make it 0x0A0A0A0A0A0A0A0A.
	ts := startServer(t, withTokenFloor(lfs-1))
	c := ts.dial(t)

	c.Send(t, wiretest.Ping(lfs))
	c.Expect(t, resp(wire.OpPing, lfs))
	c.Send(t, wiretest.Ping(0x0A))
	c.Expect(t, resp(wire.OpPing, 0x0A))
	c.Send(t, wiretest.Ping(0x0A00000000000000))
	c.Expect(t, resp(wire.OpPing, 0x0A00000000000000))

	// owner 0x0A.., wait 0x0A, lease 0x0A0A = 2570 s.
	f := wiretest.Acquire(lfs, 0x0A, 0x0A0A, "lf-key")
	if n := bytes.Count(f, []byte{'\n'}); n != 8+1+2+1 {
		t.Fatalf("frame holds %d LF bytes, want 12", n)
	}
	c.Send(t, f)
	c.Expect(t, wire.Response{Op: wire.OpAcquire, Owner: lfs, Token: lfs})

	// A token with 0x0A bytes is read whole: the wrong one by a single byte is N.
	c.Send(t, wiretest.Release(lfs, lfs^1, "lf-key"))
	c.Expect(t, resp(wire.OpNotHeld, lfs))
	c.Send(t, wiretest.Release(0x0A, lfs, "lf-key"))
	c.Expect(t, resp(wire.OpRelease, 0x0A))

	// lease 0x000A and 0x0A00 (2560 s) are in range; wait 0x0A with the key held queues.
	c.Send(t, wiretest.Acquire(1, 0, 0x000A, "lease-10"), wiretest.Acquire(2, 0, 0x0A00, "lease-2560"))
	t1 := c.ExpectGrant(t, 1)
	t2 := c.ExpectGrant(t, 2)
	if t1 != lfs+1 || t2 != lfs+2 {
		t.Fatalf("tokens %#x %#x, want %#x %#x", t1, t2, uint64(lfs+1), uint64(lfs+2))
	}
	c.Send(t, wiretest.Acquire(0x0A0A, 0x0A, 30, "lease-10"))
	ts.waitWaiters(t, 1)
	c.Send(t, wiretest.Release(3, t1, "lease-10"))
	got := c.NextByOwner(t, 2)
	if got[3] != resp(wire.OpRelease, 3) || got[0x0A0A] != (wire.Response{Op: wire.OpAcquire, Owner: 0x0A0A, Token: lfs + 3}) {
		t.Fatalf("answers %v, want R for 3 and A(token %#x) for 0x0A0A", got, uint64(lfs+3))
	}

	// 0x0A bytes around a lease of 3601 do not hide it: bad_range with the owner read whole.
	c.Send(t, wiretest.Acquire(0x0A0A0A0A, 0x0A, wire.MaxLease+1, "x"))
	c.ExpectError(t, 0x0A0A0A0A, wire.ReasonBadRange)
}

// Section 3 and 5: structural faults are E bad_request with owner 0, then close.
func TestStructuralErrors(t *testing.T) {
	ts := startServer(t)
	owner := binary.BigEndian.AppendUint64(nil, 42)
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"unknown op X", []byte("X\n")},
		{"unknown op 0x00", []byte{0, '\n'}},
		{"empty line", []byte("\n")},
		{"response op T", append(append([]byte("T"), owner...), '\n')},
		{"response op B", append(append([]byte("B"), owner...), '\n')},
		{"response op N", append(append([]byte("N"), owner...), '\n')},
		{"response op E", append(append([]byte("E"), owner...), "bad_key\n"...)},
		{"lower-case op", []byte("p\x00\x00\x00\x00\x00\x00\x00\x01\n")},
		{"ping with a tail", append(append([]byte("P"), owner...), "x\n"...)},
		{"ping with CR LF", append(append([]byte("P"), owner...), "\r\n"...)},
		{"unknown op after a valid frame", append(wiretest.Ping(1), "Z\n"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t)
			c.Send(t, tc.bytes)
			if bytes.HasPrefix(tc.bytes, wiretest.Ping(1)) {
				c.Expect(t, resp(wire.OpPing, 1))
			}
			c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
		})
	}
	if st := ts.node.Stats(); st.Keys != 0 || st.Waiters != 0 {
		t.Fatalf("structural errors changed the node: %+v", st)
	}
}

// A frame cut short by the client's end of stream: E bad_request (owner 0), close.
func TestFrameCutShort(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"op only", []byte("A")},
		{"half a header", wiretest.Acquire(5, 0, 30, "k")[:6]},
		{"header without key", wiretest.Acquire(5, 0, 30, "k")[:12]},
		{"key without LF", wiretest.Acquire(5, 0, 30, "key")[:14]},
		{"ping without LF", wiretest.Ping(5)[:9]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t)
			c.Send(t, tc.bytes)
			if err := c.NetConn().CloseWrite(); err != nil {
				t.Fatalf("half close: %v", err)
			}
			c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
		})
	}
}

// A client that closes between frames gets no error: it simply ends.
func TestCleanEndOfStream(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	c.Alive(t, 1)
	if err := c.NetConn().CloseWrite(); err != nil {
		t.Fatalf("half close: %v", err)
	}
	c.ExpectClosed(t)
}
