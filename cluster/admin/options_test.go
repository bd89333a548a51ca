package admin

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
)

// A single-mode node offers lock inspection unless it has a credential but not the
// operator's, or its --http is reachable beyond loopback with no operator credential; then
// the lock calls answer 403 saying why, and its log says so once, naming the calls and the
// flag that turns them on.
func TestLocalOptionsGateLockInspection(t *testing.T) {
	node, err := cluster.NewNode(cluster.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	operator := Credentials{AdminSecrets: [][]byte{[]byte("admin-secret-0123456789abcdef01234")}}
	for _, c := range []struct {
		name         string
		http         string
		cred         Credentials
		credentialed bool
		insecure     bool
		locks        bool
	}{
		{"loopback", "127.0.0.1:7402", Credentials{}, false, false, true},
		{"loopback, client secret", "127.0.0.1:7402", Credentials{}, true, false, false},
		{"loopback, client secret, insecure", "127.0.0.1:7402", Credentials{}, true, true, false},
		{"loopback, client secret, operator credential", "127.0.0.1:7402", operator, true, false, true},
		{"open, no credential", "0.0.0.0:7402", Credentials{}, false, false, false},
		{"open, client secret, insecure", "0.0.0.0:7402", Credentials{}, true, true, false},
		{"open, operator credential", "0.0.0.0:7402", operator, false, false, true},
		{"open, insecure", "0.0.0.0:7402", Credentials{}, false, true, true},
	} {
		var buf clustertest.Buffer
		log := hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true})
		o := LocalOptions(node, LocalConfig{Boot: "boot-1", Admin: c.cred, Credentialed: c.credentialed, HTTP: c.http, Insecure: c.insecure}, log)
		if (o.Locks != nil) != c.locks || (o.LocksOff != nil) == c.locks {
			t.Errorf("%s: lock inspection %v (off: %v), want %v", c.name, o.Locks != nil, o.LocksOff, c.locks)
		}
		if n := strings.Count(buf.String(), "lock inspection and forced release are off"); (n == 1) == c.locks || n > 1 {
			t.Errorf("%s: %d warnings with inspection %v:\n%s", c.name, n, c.locks, buf.String())
		}
		if !c.locks && (!strings.Contains(buf.String(), LockCalls) || !strings.Contains(buf.String(), "--admin-secret-file") ||
			!strings.Contains(o.LocksOff.Error(), "--admin-secret-file")) {
			t.Errorf("%s: the warning or the refusal does not name the calls and the flag:\n%s\n%v", c.name, buf.String(), o.LocksOff)
		}
		if o.Verifier == nil || o.Status == nil || o.Cluster != nil {
			t.Errorf("%s: options %+v, want a verifier and a status, no cluster", c.name, o)
		}
	}
}

// Lock calls that are off answer 403 with why, as JSON.
func TestLocksOff(t *testing.T) {
	off := errors.New("admin: the lock calls are off in this test")
	h := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{LocksOff: off})
	for _, e := range []struct{ method, path string }{{"GET", "/v1/locks"}, {"GET", "/v1/locks/show?key=k"}, {"POST", "/v1/locks/release"}} {
		r := httptest.NewRequest(e.method, "http://127.0.0.1:7402"+e.path, strings.NewReader(`{"key":"k"}`))
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), off.Error()) {
			t.Errorf("%s %s while off: %d %s", e.method, e.path, rec.Code, rec.Body.String())
		}
	}
}
