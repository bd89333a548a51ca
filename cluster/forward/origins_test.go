package forward_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/forward"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Origins (cluster/origins.go): a link with Config.Origins asks each new connection whether
// the leader wants its clients' addresses, and names each client session once per
// connection when it does.

// recorded is what a scripted leader read, in order.
type recorded struct {
	mu  sync.Mutex
	got []wire.Request
}

func (r *recorded) add(q wire.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q.Key = append([]byte(nil), q.Key...)
	r.got = append(r.got, q)
}

func (r *recorded) all() []wire.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.Request(nil), r.got...)
}

// originsLeader is a scripted leader that answers the origins probe with yes (or, !yes, as
// every older latch does: with the probe's owner), grants every acquire with token 7,
// releases every release, and answers nothing to an origin frame (R with owner 0).
func originsLeader(t *testing.T, yes bool) (*fake, *recorded) {
	t.Helper()
	rec := &recorded{}
	ld, _ := scripted(t, 0, func(r wire.Request) *wire.Response {
		rec.add(r)
		switch {
		case r.Op == wire.OpPing && r.Owner == cluster.OriginsAsk && yes:
			return &wire.Response{Op: wire.OpPing, Owner: cluster.OriginsYes}
		case r.Op == wire.OpPing:
			return &wire.Response{Op: wire.OpPing, Owner: r.Owner}
		case r.Owner == 0:
			return nil
		case r.Op == wire.OpAcquire:
			return &wire.Response{Op: wire.OpAcquire, Owner: r.Owner, Token: 7}
		}
		return &wire.Response{Op: wire.OpRelease, Owner: r.Owner}
	})
	return ld, rec
}

func withOrigins(c *forward.Config) { c.Origins = true }

// A leader that wants origins: the probe comes first, then each client session's bind frame
// (R owner 0, token its id, key its address) just before its first request, and none again
// for its later ones; every request's owner carries its session's id in the high 32 bits.
// A session that has ended, with nothing in flight, is forgotten (R owner 0, empty key).
func TestOriginsBindEachSessionOnce(t *testing.T) {
	ld, rec := originsLeader(t, true)
	link := newLink(t, ld.addr, withOrigins)
	f := startFollower(t, link)
	a, b := f.dial(t), f.dial(t)
	a.Grant(t, 1, 0, 60, "k")
	b.Grant(t, 1, 0, 60, "j")
	a.Send(t, wiretest.Release(2, 7, "k"))
	a.ExpectOp(t, wire.OpRelease, 2)
	addrA, addrB := a.NetConn().LocalAddr().String(), b.NetConn().LocalAddr().String()
	a.Close()
	eventually(t, clustertest.Bound, "the ended session forgotten", func() bool {
		got := rec.all()
		last := got[len(got)-1]
		return last.Op == wire.OpRelease && last.Owner == 0 && len(last.Key) == 0
	})

	got := rec.all()
	if len(got) != 7 {
		t.Fatalf("the leader read %d frames, want 7 (probe, 2 binds, 3 requests, forget): %+v", len(got), got)
	}
	if p := got[0]; p.Op != wire.OpPing || p.Owner != cluster.OriginsAsk {
		t.Fatalf("first frame %+v, want the origins probe", p)
	}
	ids := map[string]uint32{}
	for i, r := range got[1:6] {
		if r.Owner == 0 {
			if r.Op != wire.OpRelease || r.Token == 0 || r.Token > 1<<32-1 {
				t.Fatalf("frame %d: %+v, not a bind", i+1, r)
			}
			ids[string(r.Key)] = uint32(r.Token)
			continue
		}
		want := addrA
		if string(r.Key) == "j" {
			want = addrB
		}
		if id, ok := ids[want]; !ok || cluster.OriginOf(r.Owner) != id {
			t.Fatalf("frame %d: %+v with origin %d; want the origin bound to %s before it (binds %v)", i+1, r, cluster.OriginOf(r.Owner), want, ids)
		}
	}
	if len(ids) != 2 || ids[addrA] == ids[addrB] {
		t.Fatalf("binds %v, want one for each of %s and %s", ids, addrA, addrB)
	}
	if forget := got[6]; uint32(forget.Token) != ids[addrA] {
		t.Fatalf("forgot origin %d, want %d (%s, the session that ended)", forget.Token, ids[addrA], addrA)
	}
	idle(t, link)
	f.untouched(t)
}

// A leader that does not want origins (an older latch echoes the probe's owner, as it
// answers every ping, and so does a leader that does not audit) gets the probe and then
// exactly the requests it would get without Origins: no bind frames, owners below 2^32.
func TestOriginsRefusedChangeNothing(t *testing.T) {
	ld, rec := originsLeader(t, false)
	link := newLink(t, ld.addr, withOrigins)
	f := startFollower(t, link)
	a := f.dial(t)
	a.Grant(t, 1, 0, 60, "k")
	a.Send(t, wiretest.Release(2, 7, "k"))
	a.ExpectOp(t, wire.OpRelease, 2)
	got := rec.all()
	if len(got) != 3 || got[0].Op != wire.OpPing || got[0].Owner != cluster.OriginsAsk {
		t.Fatalf("the leader read %+v, want the probe and two requests", got)
	}
	for _, r := range got[1:] {
		if r.Owner == 0 || cluster.OriginOf(r.Owner) != 0 {
			t.Fatalf("request %+v: owner %#x carries an origin", r, r.Owner)
		}
	}
}

// A leader whose answer to the probe is no pong fails the dial: its requests are answered
// E unavailable (never sent), and the link dials again for later ones.
func TestOriginsProbeAnsweredWrongFailsTheDial(t *testing.T) {
	ld, _ := scripted(t, 0, func(r wire.Request) *wire.Response {
		return &wire.Response{Op: wire.OpError, Owner: r.Owner, Reason: wire.ReasonInternal}
	})
	link := newLink(t, ld.addr, withOrigins, func(c *forward.Config) { c.RedialDelay = 0 })
	out := make(replies, 2)
	link.Forward(acquireReq(5, 0, "k"), time.Now(), out)
	out.expect(t, errResp(5, wire.ReasonUnavailable))
	if st := link.Stats(); st.Conns != 0 {
		t.Fatalf("link stats %+v, want no connection", st)
	}
}

// End to end with the leader's own session (server.ServePeer) and its audit trail: a leader
// that audits names each client of the follower by its address, via the link; one that does
// not audit is asked and says no, and answers as before.
func TestOriginsReachTheLeadersAuditTrail(t *testing.T) {
	trail := &clustertest.Buffer{}
	cfg := cluster.DefaultConfig()
	cfg.Audit = hclog.New(&hclog.LoggerOptions{Output: trail, JSONFormat: true, Level: hclog.Info})
	ld := startLeader(t, cfg)
	link := newLink(t, ld.peer, withOrigins)
	f := startFollower(t, link)
	a := f.dial(t)
	tok := a.Grant(t, 1, 0, 60, "k")
	a.Send(t, wiretest.Release(2, tok, "k"))
	a.ExpectOp(t, wire.OpRelease, 2)
	addr := a.NetConn().LocalAddr().String()
	var lines []map[string]any
	eventually(t, clustertest.Bound, "the grant and the release audited", func() bool {
		lines = lines[:0]
		for _, s := range strings.Split(strings.TrimSpace(trail.String()), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(s), &l) == nil {
				lines = append(lines, l)
			}
		}
		return len(lines) == 2
	})
	for _, l := range lines {
		if l["from"] != addr || l["via"] == nil || strings.HasPrefix(l["via"].(string), "peer") {
			t.Errorf("audit line %v: want from %s and via the link's address", l, addr)
		}
	}

	quiet := startLeader(t) // no audit trail: it says no, and the link works as before
	link2 := newLink(t, quiet.peer, withOrigins)
	f2 := startFollower(t, link2)
	b := f2.dial(t)
	b.Grant(t, 1, 0, 60, "k")
	idle(t, link2)
}
