package member

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// withAudit gives every member an audit trail of its own (JSON lines), kept in trails by
// member ID.
func withAudit(trails map[string]*clustertest.Buffer) func(*Config) {
	return func(c *Config) {
		b := &clustertest.Buffer{}
		trails[c.Raft.ID] = b
		c.Node.Audit = hclog.New(&hclog.LoggerOptions{Output: b, JSONFormat: true, Level: hclog.Info})
	}
}

// auditLines parses b's lines.
func auditLines(t *testing.T, b *clustertest.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

// awaitAudit waits for the line of event on key in b and returns it.
func awaitAudit(t *testing.T, b *clustertest.Buffer, event, key string) map[string]any {
	t.Helper()
	var got map[string]any
	clustertest.Eventually(t, clustertest.Bound, event+" of "+key+" in the audit trail", func() bool {
		for _, l := range auditLines(t, b) {
			if l["event"] == event && l["key"] == key {
				got = l
				return true
			}
		}
		return false
	})
	return got
}

// expectOrigin fails unless line l says it came from from, through via (absent: "").
func expectOrigin(t *testing.T, l map[string]any, from, via string) {
	t.Helper()
	gotVia, _ := l["via"].(string)
	if l["from"] != from || gotVia != via {
		t.Errorf("audit line %v: from %v via %q, want from %q via %q", l, l["from"], gotVia, from, via)
	}
}

// The leader's audit trail names the client of a follower by the address the client's own
// connection has (its local address), and the follower it came through; each client of the
// follower is named by its own address, on the one link they share. The follower, which
// decides nothing, audits nothing.
func TestAuditNamesForwardedClients(t *testing.T) {
	trails := map[string]*clustertest.Buffer{}
	ms := startCluster(t, 3, withAudit(trails))
	leader, follower := leaderOf(t, ms)
	lt := trails[leader.m.ID()]

	a, b := wiretest.Dial(t, follower.clients), wiretest.Dial(t, follower.clients)
	a.Hello(t, nil)
	b.Hello(t, nil)
	tokA := a.Grant(t, 1, 0, 60, "audit/a")
	tokB := b.Grant(t, 1, 0, 60, "audit/b")
	a.Send(t, wiretest.Release(2, tokA, "audit/a"))
	a.ExpectOp(t, wire.OpRelease, 2)
	b.Send(t, wiretest.Release(2, tokB+100, "audit/b")) // not its token: N, audited too
	b.ExpectOp(t, wire.OpNotHeld, 2)

	addrA, addrB := a.NetConn().LocalAddr().String(), b.NetConn().LocalAddr().String()
	expectOrigin(t, awaitAudit(t, lt, "grant", "audit/a"), addrA, follower.m.ID())
	expectOrigin(t, awaitAudit(t, lt, "release", "audit/a"), addrA, follower.m.ID())
	expectOrigin(t, awaitAudit(t, lt, "grant", "audit/b"), addrB, follower.m.ID())
	if l := awaitAudit(t, lt, "release", "audit/b"); l["result"] != "not_held" {
		t.Errorf("release of another token: %v, want result not_held", l)
	} else {
		expectOrigin(t, l, addrB, follower.m.ID())
	}
	if got := trails[follower.m.ID()].String(); got != "" {
		t.Errorf("the follower audited what the leader decided:\n%s", got)
	}

	// A client that leaves: its session is forgotten on the link, and a new client of the
	// follower is named by its own address.
	a.Close()
	c := wiretest.Dial(t, follower.clients)
	c.Hello(t, nil)
	c.Grant(t, 1, 0, 60, "audit/c")
	expectOrigin(t, awaitAudit(t, lt, "grant", "audit/c"), c.NetConn().LocalAddr().String(), follower.m.ID())
}

// A forced release made at a follower's admin HTTP and relayed to the leader over the admin
// channel is audited by the leader with the operator's remote address, the follower it
// came through and which admin credential signed it (a fingerprint, not the secret); made
// at the leader itself, with the address only.
func TestAuditNamesTheOperator(t *testing.T) {
	trails := map[string]*clustertest.Buffer{}
	ms := startCluster(t, 2, withAudit(trails))
	leader, follower := leaderOf(t, ms)
	lt := trails[leader.m.ID()]
	c := wiretest.Dial(t, leader.clients)
	c.Hello(t, nil)
	c.Grant(t, 1, 0, 60, "audit/forced")
	c.Grant(t, 2, 0, 60, "audit/direct")

	secret := []byte("member-test-admin-secret-0123456789abcdef") // startCluster's
	release := func(tm *tmember, remote, key string) {
		t.Helper()
		boot := "boot-" + tm.m.ID()
		h := admin.Handler(prometheus.NewRegistry(), func() error { return nil }, tm.m.AdminOptions(boot))
		body := []byte(`{"key":"` + key + `"}`)
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:7402/v1/locks/release", bytes.NewReader(body))
		r.RemoteAddr = remote
		r.Header.Set("Content-Type", "application/json")
		if err := admin.Sign(r, secret, admin.Target{Node: tm.m.ID(), Boot: boot}, admin.Digest(body), time.Now()); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Fatalf("forced release of %s at %s: %d %s", key, tm.m.ID(), rec.Code, rec.Body.String())
		}
	}

	release(follower, "198.51.100.7:40001", "audit/forced")
	l := awaitAudit(t, lt, "force_release", "audit/forced")
	expectOrigin(t, l, "operator 198.51.100.7:40001", follower.m.ID())
	cred, _ := l["cred"].(string)
	if !strings.HasPrefix(cred, "admin secret ") || len(cred) != len("admin secret ")+16 {
		t.Errorf("cred %q, want the admin secret's fingerprint (\"admin secret\" and 16 hex digits)", cred)
	}
	if line := fmt.Sprint(l); strings.Contains(line, string(secret)) {
		t.Errorf("the audit line shows the secret: %s", line)
	}

	release(leader, "198.51.100.8:40002", "audit/direct")
	l = awaitAudit(t, lt, "force_release", "audit/direct")
	expectOrigin(t, l, "operator 198.51.100.8:40002", "")
	if l["cred"] != cred {
		t.Errorf("cred at the leader %v, want %q, the same secret's at the follower", l["cred"], cred)
	}
	if got := trails[follower.m.ID()].String(); got != "" {
		t.Errorf("the follower audited what the leader decided:\n%s", got)
	}
}
