package cluster

import (
	"testing"
	"time"

	"github.com/latchd/latch/wire"
)

// forwarder records what a follower's Forwarded replier sends on, and answers nothing.
type forwarder struct{ got []wire.Request }

func (f *forwarder) Forward(req *wire.Request, readAt time.Time, out Replier) {
	r := *req
	r.Key = append([]byte(nil), req.Key...)
	f.got = append(f.got, r)
}

// A forwarded acquire's answers go to its session while it is attached; a grant that comes
// back after the session was detached is released through the forwarder (nobody else would
// release it before its lease ends), and anything else is dropped.
func TestForwardedGrantToADetachedSessionIsReleased(t *testing.T) {
	h := newHarness(t, nil)
	out := &recorder{}
	c := h.n.Attach(out, "test")
	f := &forwarder{}
	key := []byte("k")
	live := h.n.Forwarded(c, key, f)
	key[0] = 'x' // the caller's buffer is reused: Forwarded keeps a copy

	live.Reply(wire.Response{Op: wire.OpAcquire, Owner: 3, Token: 7})
	if r := out.one(t); r.Op != wire.OpAcquire || r.Owner != 3 || r.Token != 7 {
		t.Fatalf("attached: %+v, want the grant relayed", r)
	}
	if len(f.got) != 0 {
		t.Fatalf("attached: forwarded %+v, want nothing", f.got)
	}

	late := h.n.Forwarded(c, []byte("k"), f)
	h.n.Detach(c)
	late.Reply(wire.Response{Op: wire.OpTimeout, Owner: 4})
	late.Reply(wire.Response{Op: wire.OpAcquire, Owner: 4, Token: 9})
	if g := out.take(); len(g) != 1 || g[0].Op != wire.OpTimeout {
		t.Fatalf("detached: session got %+v, want only the T (passed on: a closed session drops it)", g)
	}
	if len(f.got) != 1 {
		t.Fatalf("detached: forwarded %+v, want one release", f.got)
	}
	if r := f.got[0]; r.Op != wire.OpRelease || r.Token != 9 || string(r.Key) != "k" || r.Owner == 0 || r.Check() != "" {
		t.Fatalf("detached: forwarded %+v, want a valid release of k, token 9", r)
	}
}
