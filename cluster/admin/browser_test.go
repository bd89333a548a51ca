package admin

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// cliRequest is an admin request as the CLI sends it to 127.0.0.1:7402: its Host, and a
// POST's Content-Type.
func cliRequest(method, path string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, "http://127.0.0.1:7402"+path, body)
	if method == http.MethodPost {
		r.Header.Set("Content-Type", ContentType(path))
	}
	return r
}

func mustHosts(t *testing.T, listen string, names ...string) Hosts {
	t.Helper()
	h, err := NewHosts(listen, names...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A Host passes when it is an IP address, localhost, or a name the node was given, in any
// case, with any port or none, with or without the trailing dot; nothing else does.
func TestHostsAllow(t *testing.T) {
	h := mustHosts(t, "latch-0.example:7402", "latch", "https://latch.ns.svc:7402", "Proxy.Example.", "10.0.0.9:7402", "[::1]")
	if got, want := strings.Join(h.Names(), ","), "latch,latch-0.example,latch.ns.svc,proxy.example"; got != want {
		t.Fatalf("names %s, want %s", got, want)
	}
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:7402", true}, {"127.0.0.1", true}, {"10.1.2.3:8080", true}, {"[::1]:7402", true}, {"[::1]", true},
		{"[fe80::1%eth0]:7402", true},
		{"localhost:7402", true}, {"LOCALHOST", true}, {"localhost.:1", true},
		{"latch:7402", true}, {"latch", true}, {"LATCH-0.example:9", true}, {"latch.ns.svc", true}, {"proxy.example.:443", true},
		{"evil.example", false}, {"evil.example:7402", false}, {"latch.evil.example", false}, {"sub.latch", false},
		{"127.0.0.1.nip.io:7402", false}, {"2130706433", false}, {"0x7f.1", false}, {"", false}, {":7402", false},
	} {
		if got := h.Allows(c.host); got != c.ok {
			t.Errorf("Allows(%q) = %v, want %v", c.host, got, c.ok)
		}
	}
	if (Hosts{}).Allows("latch:7402") || !(Hosts{}).Allows("localhost:7402") || !(Hosts{}).Allows("192.0.2.1:7402") {
		t.Error("the zero Hosts: want IP addresses and localhost only")
	}
	// With adds the node's own names, skipping what is none.
	if got := strings.Join(h.With("n1.peers:7401", "", "http://x y", "10.0.0.1:7401").Names(), ","); got != "latch,latch-0.example,latch.ns.svc,n1.peers,proxy.example" {
		t.Errorf("With: %s", got)
	}
}

// A listen address on every interface adds the machine's hostname; a loopback or an IP
// address one adds nothing; a name that is none is refused, naming it.
func TestNewHosts(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:7402", ":7402", "[::]:7402"} {
		if n := len(mustHosts(t, listen).Names()); n > 1 {
			t.Errorf("%s: names %q, want the hostname at most", listen, mustHosts(t, listen).Names())
		}
	}
	for _, listen := range []string{"127.0.0.1:7402", "localhost:7402", "10.0.0.5:7402", "[::1]:7402"} {
		if n := mustHosts(t, listen).Names(); len(n) != 0 {
			t.Errorf("%s: names %q, want none", listen, n)
		}
	}
	for _, bad := range []string{"", "evil example", "*.example.com", "a..b", "ex@mple", strings.Repeat("a", 64) + ".com"} {
		if _, err := NewHosts("127.0.0.1:7402", bad); err == nil || !strings.Contains(err.Error(), "not a host name") {
			t.Errorf("NewHosts(%q): %v, want an error naming it", bad, err)
		}
	}
}

// fakeLocks counts the forced releases that reach it.
type fakeLocks struct{ released atomic.Int32 }

func (*fakeLocks) List(context.Context, string, string, int) (LockPage, error) {
	return LockPage{Locks: []Lock{{Key: "secret/key", Held: true, Token: 7}}, Held: 1}, nil
}
func (*fakeLocks) Show(_ context.Context, key string) (Lock, error) {
	return Lock{Key: key, Held: true, Token: 7}, nil
}
func (l *fakeLocks) Release(context.Context, string, uint64) (uint64, error) {
	l.released.Add(1)
	return 7, nil
}

// Every admin endpoint of a node with no credentials at all (loopback) refuses what a web
// page can make a browser send: a cross-site simple POST, a request of another origin with
// the right Host, a DNS-rebinding request (the page's own name as Host; reads too), a
// text/plain or undeclared POST, a cross-site fetch. Nothing reaches the cluster or the lock
// table. The CLI's requests pass; so do the probes, with any Host and Origin.
func TestBrowserRequestsRefused(t *testing.T) {
	c, l := &recorder{self: "n4"}, &fakeLocks{}
	h := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{
		Cluster: c, Locks: l, Pprof: true, Status: func() any { return self }, Hosts: mustHosts(t, "127.0.0.1:7402", "latch"),
	})
	endpoints := []struct{ method, path, body string }{
		{"GET", "/v1/status", ""},
		{"GET", "/v1/peers", ""},
		{"POST", "/v1/peers", `{"id":"n4","addr":"127.0.0.1:7401","nonvoter":true}`},
		{"DELETE", "/v1/peers/n2", ""},
		{"GET", "/v1/snapshot", ""},
		{"POST", "/v1/restore?token_floor=1", "a backup"},
		{"GET", "/v1/locks", ""},
		{"GET", "/v1/locks/show?key=k", ""},
		{"POST", "/v1/locks/release", `{"key":"k"}`},
		{"GET", "/debug/pprof/", ""},
	}
	type req struct {
		name              string
		host, origin, typ string
		site              string
		code              int
		posts             bool // only for POSTs
	}
	refused := []req{
		{"cross-site simple POST", "evil.example", "http://evil.example", "text/plain", "cross-site", 421, true},
		{"foreign Origin, right Host", "127.0.0.1:7402", "http://evil.example", "application/json", "", 403, false},
		{"another port's page", "127.0.0.1:7402", "http://127.0.0.1:8080", "application/json", "same-site", 403, false},
		{"Origin null", "127.0.0.1:7402", "null", "application/json", "", 403, false},
		{"Origin of another scheme", "127.0.0.1:7402", "https://127.0.0.1:7402", "application/json", "", 403, false},
		{"cross-site fetch, no Origin", "127.0.0.1:7402", "", "application/json", "cross-site", 403, false},
		{"DNS rebinding", "evil.example:7402", "http://evil.example:7402", "application/json", "same-origin", 421, false},
		{"DNS rebinding, no Origin", "evil.example:7402", "", "", "", 421, false},
		{"text/plain POST", "127.0.0.1:7402", "", "text/plain", "", 415, true},
		{"form POST", "127.0.0.1:7402", "", "application/x-www-form-urlencoded", "", 415, true},
		{"multipart POST", "localhost:7402", "", "multipart/form-data; boundary=x", "", 415, true},
		{"undeclared POST", "127.0.0.1:7402", "", "", "", 415, true},
		{"JSON hidden in a parameter", "127.0.0.1:7402", "", "text/plain; a=application/json", "", 415, true},
	}
	send := func(e struct{ method, path, body string }, q req) *httptest.ResponseRecorder {
		r := httptest.NewRequest(e.method, "http://127.0.0.1:7402"+e.path, strings.NewReader(e.body))
		r.Host = q.host
		for k, v := range map[string]string{"Origin": q.origin, "Content-Type": q.typ, "Sec-Fetch-Site": q.site} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	for _, e := range endpoints {
		for _, q := range refused {
			if q.posts && e.method != "POST" {
				continue
			}
			rec := send(e, q)
			if rec.Code != q.code || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") || !strings.Contains(rec.Body.String(), `"error":"admin: `) {
				t.Errorf("%s %s, %s: %d %s; want %d with a JSON error", e.method, e.path, q.name, rec.Code, rec.Body.String(), q.code)
			}
			if strings.Contains(rec.Body.String(), "secret/key") || rec.Header().Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s %s, %s: the refusal leaks: %v %s", e.method, e.path, q.name, rec.Header(), rec.Body.String())
			}
		}
	}
	if n, m := c.changes.Load(), l.released.Load(); n != 0 || m != 0 {
		t.Fatalf("%d changes and %d releases from a web page reached the node", n, m)
	}

	// What the CLI sends passes: an IP address, localhost or a name of the node, any port, a
	// POST with its Content-Type; a same-origin Origin too.
	for _, e := range endpoints {
		for _, q := range []req{
			{name: "the CLI", host: "127.0.0.1:7402"},
			{name: "through docker -p", host: "127.0.0.1:7430"},
			{name: "through a port-forward", host: "localhost:8080"},
			{name: "by the Service's name", host: "latch:7402"},
			{name: "IPv6", host: "[::1]:7402"},
			{name: "same origin", host: "127.0.0.1:7402", origin: "http://127.0.0.1:7402", site: "same-origin"},
		} {
			if e.method == "POST" {
				q.typ = ContentType(e.path)
			}
			if rec := send(e, q); rec.Code != http.StatusOK {
				t.Errorf("%s %s, %s: %d %s", e.method, e.path, q.name, rec.Code, rec.Body.String())
			}
		}
	}
	if l.released.Load() == 0 || c.changes.Load() == 0 {
		t.Fatal("the CLI's calls did not reach the node")
	}
	// The probes take any Host and any Origin.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		for _, m := range []string{"GET", "HEAD"} {
			if rec := send(struct{ method, path, body string }{m, p, ""}, req{host: "10.0.0.7:7402", origin: "http://evil.example"}); rec.Code != http.StatusOK {
				t.Errorf("%s %s from anywhere: %d", m, p, rec.Code)
			}
			if rec := send(struct{ method, path, body string }{m, p, ""}, req{host: "evil.example", origin: "http://evil.example", site: "cross-site"}); rec.Code != http.StatusOK {
				t.Errorf("%s %s with a foreign Host: %d, want 200 (probes are exempt)", m, p, rec.Code)
			}
		}
	}
	// A POST to a probe's path is no probe.
	if rec := send(struct{ method, path, body string }{"POST", "/healthz", ""}, req{host: "evil.example"}); rec.Code != 421 {
		t.Errorf("POST /healthz with a foreign Host: %d, want 421", rec.Code)
	}
}

// A signed call needs no Content-Type (a latch before this rule sent none): no page can add
// the Authorization header without a preflight. Its Host and Origin are still checked.
func TestSignedPostWithoutContentType(t *testing.T) {
	l := &fakeLocks{}
	h := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{Locks: l, Verifier: testVerifier(Credentials{AdminSecrets: [][]byte{adminNew}})})
	body := []byte(`{"key":"k"}`)
	r := signed(t, adminNew, "POST", "/v1/locks/release", body, at)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK || l.released.Load() != 1 {
		t.Fatalf("a signed release without Content-Type: %d %s", rec.Code, rec.Body.String())
	}
	r = signed(t, adminNew, "POST", "/v1/locks/release", body, at)
	r.Header.Set("Origin", "http://evil.example")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden || l.released.Load() != 1 {
		t.Fatalf("a signed release from a foreign Origin: %d %s", rec.Code, rec.Body.String())
	}
}
