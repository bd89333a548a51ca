package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// webTarget is a node with no credential on loopback, and the admin calls it serves.
type webTarget struct {
	name    string
	p       *proc
	calls   []webCall
	cluster bool
}

type webCall struct {
	method, path string
	body         []byte
}

// TestWebPagesCannotReachAdminCalls: on a single-mode server and on a cluster node, both
// with no credential at all on loopback, what a web page can make a browser send is refused
// at every admin endpoint: a cross-site text/plain POST (Origin and Host evil.example), a
// request with the right Host but a foreign Origin, a DNS-rebinding request (Host
// evil.example: the page reads the answer) to every read too, and a text/plain POST with
// the right Host. No lock is freed, no member added or removed, nothing restored. The probes
// answer with any Host, and the official CLI verbs all still work.
func TestWebPagesCannotReachAdminCalls(t *testing.T) {
	clustertest.Slow(t, "starts latch servers as processes")
	const key = "web/held"
	release := webCall{"POST", "/v1/locks/release", []byte(`{"key":"` + key + `"}`)}
	lockCalls := []webCall{{"GET", "/v1/status", nil}, {"GET", "/v1/locks", nil}, {"GET", "/v1/locks/show?key=" + key, nil}, release}
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		p := startServer(t, nil, "--http-allowed-host", "proxy.example,Other.Example.")
		checkWebPages(t, webTarget{name: "single mode", p: p, calls: lockCalls}, key)
		// A name given with --http-allowed-host passes, with any port; the start log lists it.
		if code, body := rawCall(t, p.http, "GET", "/v1/status", "proxy.example:8443", "", "", nil); code != 200 {
			t.Errorf("GET /v1/status with Host proxy.example: %d %s", code, body)
		}
		if hosts, _ := p.served["http_hosts"].([]any); len(hosts) != 2 || hosts[0] != "other.example" || hosts[1] != "proxy.example" {
			t.Errorf("latch serving: http_hosts %v, want other.example and proxy.example", p.served["http_hosts"])
		}
		// One that is no host name: the server does not start, naming the flag.
		if code, out := run(t, nil, "server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--http-allowed-host", "evil example"); code != 1 || !strings.Contains(out, `--http-allowed-host "evil example"`) {
			t.Errorf("server --http-allowed-host 'evil example': exit %d, %q", code, out)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		tc := startTestCluster(t, 1)
		tc.leader()
		p := tc.procs[0]
		checkWebPages(t, webTarget{name: "a cluster node", p: p, cluster: true, calls: append(lockCalls,
			webCall{"GET", "/v1/peers", nil},
			webCall{"POST", "/v1/peers", []byte(`{"id":"n9","addr":"127.0.0.1:1","nonvoter":true}`)},
			webCall{"DELETE", "/v1/peers/n1", nil},
			webCall{"GET", "/v1/snapshot", nil},
			webCall{"POST", "/v1/restore?token_floor=0", nil}, // the body: an empty backup, taken below
		)}, key)
	})
}

func checkWebPages(t *testing.T, w webTarget, key string) {
	p := w.p
	backup := filepath.Join(t.TempDir(), "empty.snap")
	if w.cluster {
		if code, out := run(t, nil, "snapshot", "save", "--http", p.http, backup); code != 0 {
			t.Fatalf("snapshot save: exit %d, %q", code, out)
		}
		data, err := os.ReadFile(backup)
		if err != nil {
			t.Fatal(err)
		}
		for i := range w.calls {
			if strings.HasPrefix(w.calls[i].path, "/v1/restore") {
				w.calls[i].body = data
			}
		}
	}
	c := p.dial(t)
	if r := c.Do(t, wiretest.Acquire(1, 0, 3600, key)); r.Op != wire.OpAcquire {
		t.Fatalf("acquire: %s", wiretest.Describe(r))
	}

	port := p.http[strings.LastIndex(p.http, ":"):]
	for _, e := range w.calls {
		ctype := ""
		if e.method == "POST" {
			ctype = admin.ContentType(e.path)
		}
		for _, b := range []struct {
			name, host, origin, ctype string
			code                      int
			post                      bool
		}{
			{"a cross-site text/plain POST", "evil.example", "http://evil.example", "text/plain", 421, true},
			{"the right Host, a foreign Origin", p.http, "http://evil.example", ctype, 403, false},
			{"DNS rebinding", "evil.example" + port, "http://evil.example" + port, ctype, 421, false},
			{"DNS rebinding, no Origin", "evil.example" + port, "", ctype, 421, false},
			{"a text/plain POST, the right Host", p.http, "", "text/plain", 415, true},
			{"an undeclared POST, the right Host", p.http, "", "", 415, true},
		} {
			if b.post && e.method != "POST" {
				continue
			}
			code, body := rawCall(t, p.http, e.method, e.path, b.host, b.origin, b.ctype, e.body)
			if code != b.code || !strings.Contains(body, `"error":"admin: `) || strings.Contains(body, key) {
				t.Errorf("%s, %s %s, %s: %d %.300s; want %d with a JSON error", w.name, e.method, e.path, b.name, code, body, b.code)
			}
		}
	}
	heldOn(t, p.listen, nil, key)
	if w.cluster {
		if code, out := run(t, nil, "peers", "list", "--http", p.http); code != 0 || strings.Count(out, " voter") != 1 || strings.Contains(out, "n9") {
			t.Fatalf("members after the refused calls: exit %d\n%s", code, out)
		}
	}
	// The probes answer whatever the Host.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := rawCall(t, p.http, "GET", path, "evil.example"+port, "http://evil.example", "", nil); code != 200 {
			t.Errorf("%s, GET %s with Host evil.example: %d %.200s; want 200 (probes take any Host)", w.name, path, code, body)
		}
	}

	// The official verbs: through 127.0.0.1 and localhost.
	local := "localhost" + port
	for _, args := range [][]string{
		{"status", "--http", p.http},
		{"status", "--http", local},
		{"locks", "--http", local},
		{"locks", "show", "--http", p.http, key},
	} {
		if code, out := run(t, nil, args...); code != 0 || args[0] == "locks" && !strings.Contains(out, key) {
			t.Fatalf("%s: latch %v: exit %d, %q", w.name, args, code, out)
		}
	}
	if w.cluster {
		if code, out := run(t, nil, "peers", "list", "--http", local); code != 0 || !strings.Contains(out, "n1") {
			t.Fatalf("latch peers list: exit %d, %q", code, out)
		}
		if code, out := run(t, nil, "snapshot", "save", "--http", local, filepath.Join(t.TempDir(), "s")); code != 0 {
			t.Fatalf("latch snapshot save: exit %d, %q", code, out)
		}
		if code, out := run(t, nil, "snapshot", "restore", "--http", p.http, "--token-floor", "0", backup); code != 0 || !strings.Contains(out, "the cluster holds 0 keys") {
			t.Fatalf("latch snapshot restore: exit %d, %q", code, out)
		}
	} else if code, out := run(t, nil, "locks", "release", "--http", p.http, key); code != 0 || !strings.Contains(out, "released "+key) {
		t.Fatalf("latch locks release: exit %d, %q", code, out)
	}
	// Freed by the official verb (the restore of the empty backup, or the release).
	clustertest.Eventually(t, 20*time.Second, key+" is free", func() bool {
		_, out := run(t, nil, "locks", "show", "--http", p.http, key)
		return strings.Contains(out, key+" free")
	})
}
