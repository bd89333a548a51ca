package admin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a cluster that counts the changes that reach it: a real one cannot tell the
// test that a refused call never got there. Over real nodes, cmd/latch's process tests
// check the same refusals.
type recorder struct {
	changes atomic.Int32
	self    string // the id CheckSelf finds at every address
}

func (c *recorder) Members() ([]Member, error) { return nil, nil }
func (c *recorder) AddMember(context.Context, string, string, bool) error {
	c.changes.Add(1)
	return nil
}
func (c *recorder) RemoveMember(context.Context, string) error { c.changes.Add(1); return nil }
func (c *recorder) Backup(_ context.Context, w io.Writer) (fsm.SnapshotInfo, error) {
	c.changes.Add(1)
	return fsm.SnapshotInfo{}, nil
}
func (c *recorder) Restore(context.Context, []byte, uint64) (raftnode.Restored, error) {
	c.changes.Add(1)
	return raftnode.Restored{}, nil
}
func (c *recorder) State() (NodeState, error) { return NodeState{}, nil }
func (c *recorder) CheckSelf(_ context.Context, id, _ string) error {
	if id != c.self {
		return errors.New("the node at that address is " + c.self)
	}
	return nil
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	r    io.Reader
	read *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}
func (countingBody) Close() error { return nil }

// Every admin endpoint refuses the client secret (401, naming --admin-secret-file) and a
// peer secret (403), except a peer adding itself; none reads a byte of the body of a call
// it refuses, and a refused call changes nothing.
func TestAccessByPrincipal(t *testing.T) {
	c := &recorder{self: "n4"}
	v := testVerifier(Credentials{AdminSecrets: [][]byte{adminNew}, PeerSecrets: [][]byte{peerSecret}})
	h := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{Cluster: c, Verifier: v})
	add := []byte(`{"id":"n4","addr":"127.0.0.1:7401","nonvoter":true}`)
	endpoints := []struct {
		method, path string
		body         []byte
	}{
		{"POST", "/v1/peers", add},
		{"DELETE", "/v1/peers/n2", nil},
		{"GET", "/v1/snapshot", nil},
		{"POST", "/v1/restore?token_floor=1", bytes.Repeat([]byte("b"), 1<<20)},
	}
	do := func(r *http.Request, body []byte) (*httptest.ResponseRecorder, int64) {
		var read atomic.Int64
		r.Body = countingBody{bytes.NewReader(body), &read}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec, read.Load()
	}
	for _, e := range endpoints {
		for _, c2 := range []struct {
			name   string
			secret []byte
			code   int
			says   string
		}{
			{"client secret", clientSec, http.StatusUnauthorized, "--admin-secret-file"},
			{"unsigned", nil, http.StatusUnauthorized, "--admin-secret-file"},
		} {
			r := cliRequest(e.method, e.path, nil)
			if c2.secret != nil {
				Sign(r, c2.secret, self, Digest(e.body), at)
			}
			rec, read := do(r, e.body)
			if rec.Code != c2.code || !strings.Contains(rec.Body.String(), c2.says) || read != 0 {
				t.Errorf("%s %s with the %s: %d %q, %d body bytes read; want %d naming %s, none read",
					e.method, e.path, c2.name, rec.Code, rec.Body.String(), read, c2.code, c2.says)
			}
		}
		if e.path == "/v1/peers" {
			continue
		}
		r := cliRequest(e.method, e.path, nil)
		Sign(r, peerSecret, self, Digest(e.body), at)
		if rec, read := do(r, e.body); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "--admin-secret-file") || read != 0 {
			t.Errorf("%s %s with the peer secret: %d %q, %d bytes read; want 403 naming --admin-secret-file", e.method, e.path, rec.Code, rec.Body.String(), read)
		}
	}
	if n := c.changes.Load(); n != 0 {
		t.Fatalf("%d refused calls reached the cluster", n)
	}

	// A peer adds itself; it may not add another node.
	r := cliRequest("POST", "/v1/peers", nil)
	Sign(r, peerSecret, self, Digest(add), at)
	if rec, _ := do(r, add); rec.Code != http.StatusOK {
		t.Fatalf("a peer adding itself: %d %s", rec.Code, rec.Body.String())
	}
	other := []byte(`{"id":"n5","addr":"127.0.0.1:7401"}`)
	r = cliRequest("POST", "/v1/peers", nil)
	Sign(r, peerSecret, self, Digest(other), at)
	if rec, _ := do(r, other); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "only lets a node add") {
		t.Fatalf("a peer adding another node: %d %s, want 403", rec.Code, rec.Body.String())
	}
	// The operator may make every call; a body that is not the one signed is refused unread
	// past its end, and nothing is applied.
	before := c.changes.Load()
	for _, e := range endpoints {
		r := cliRequest(e.method, e.path, nil)
		Sign(r, adminNew, self, Digest(e.body), at)
		if rec, _ := do(r, e.body); rec.Code != http.StatusOK {
			t.Errorf("%s %s signed with the admin secret: %d %s", e.method, e.path, rec.Code, rec.Body.String())
		}
	}
	if got := c.changes.Load() - before; got != int32(len(endpoints)) {
		t.Fatalf("%d of %d admin calls reached the cluster", got, len(endpoints))
	}
	r = cliRequest("POST", "/v1/restore?token_floor=1", nil)
	Sign(r, adminNew, self, Digest([]byte("the backup signed")), at)
	before = c.changes.Load()
	if rec, _ := do(r, []byte("another backup!!!")); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "nothing was applied") {
		t.Fatalf("a restore whose body is not the one signed: %d %s, want 400", rec.Code, rec.Body.String())
	}
	if c.changes.Load() != before {
		t.Fatal("a restore with a body that does not match its signature was applied")
	}
}
