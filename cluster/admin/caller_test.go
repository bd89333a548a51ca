package admin

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/clustertest"
)

// callers is a node that records the caller of every forced release and removal it is
// asked for, and answers them as done.
type callers struct {
	failing
	seen chan Caller
}

func (c callers) Release(ctx context.Context, _ string, token uint64) (uint64, error) {
	c.seen <- CallerOf(ctx)
	return token, nil
}

func (c callers) RemoveMember(ctx context.Context, _ string) error {
	c.seen <- CallerOf(ctx)
	return nil
}

// An admin call over HTTP carries its caller to the node: the remote address and, once the
// call is verified, which credential proved it, by a fingerprint that is not the secret.
func TestHTTPCallNamesItsCaller(t *testing.T) {
	secret := []byte("caller-test-admin-secret-0123456789abcdef")
	self := Target{Node: "n1", Boot: strings.Repeat("b", bootLen)}
	node := callers{seen: make(chan Caller, 1)}
	h := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{
		Locks: node, Cluster: node, Verifier: NewVerifier(self, Credentials{AdminSecrets: [][]byte{[]byte("another-secret-0123456789abcdef0123"), secret}}, nil),
	})
	body := []byte(`{"key":"k","token":7}`)
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:7402/v1/locks/release", bytes.NewReader(body))
	r.RemoteAddr = "198.51.100.7:40001"
	r.Header.Set("Content-Type", "application/json")
	if err := Sign(r, secret, self, Digest(body), time.Now()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("forced release: %d %s", rec.Code, rec.Body.String())
	}
	got := <-node.seen
	if got.Addr != "198.51.100.7:40001" || got.Via != "" || got.Cred != secretID(Operator, secret) {
		t.Fatalf("caller %+v, want the remote address and the second admin secret's id %q", got, secretID(Operator, secret))
	}
	if id := strings.TrimPrefix(got.Cred, "admin secret "); len(id) != 16 || strings.Contains(got.Cred, string(secret)) {
		t.Fatalf("credential id %q: want 16 hex digits, not the secret", got.Cred)
	}
	if secretID(Operator, []byte("another-secret-0123456789abcdef0123")) == got.Cred {
		t.Fatal("two secrets have the same id")
	}
}

// A follower relays the caller on the admin channel: the leader's node gets it with the
// follower as via, and its log line names them. A request from a follower of an older latch
// (no caller field) has none, and is logged as before.
func TestChannelRelaysTheCaller(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	node := callers{seen: make(chan Caller, 1)}
	logs := &clustertest.Buffer{}
	go ServeChannel(ln, node, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	defer cancel()

	from := WithCaller(ctx, Caller{Addr: "198.51.100.7:40001", Cred: "admin secret 0123456789abcdef"})
	if _, _, _, err := CallLocks(Relayed(from, "n2"), dial(), ChannelRequest{Op: "force-release", Key: "k", Token: 7}); err != nil {
		t.Fatalf("relayed forced release: %v", err)
	}
	want := Caller{Addr: "198.51.100.7:40001", Cred: "admin secret 0123456789abcdef", Via: "n2"}
	if got := <-node.seen; got != want {
		t.Fatalf("the leader's node got caller %+v, want %+v", got, want)
	}
	clustertest.Eventually(t, clustertest.Bound, "the channel's log line", func() bool {
		return strings.Contains(logs.String(), `op=force-release id="" key=k error="" from=198.51.100.7:40001 via=n2 cred="admin secret 0123456789abcdef"`)
	})

	// As an older follower sends it: no caller.
	if err := CallChannel(ctx, dial(), ChannelRequest{Op: "remove", ID: "n3"}); err != nil {
		t.Fatalf("removal: %v", err)
	}
	if got := <-node.seen; got != (Caller{}) {
		t.Fatalf("caller of a request without one: %+v", got)
	}
	clustertest.Eventually(t, clustertest.Bound, "the removal's log line", func() bool {
		return strings.Contains(logs.String(), "admin channel request: op=remove id=n3 key=\"\" error=\"\"\n")
	})
}
