package cluster

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/wire"
)

// The audit trail of a forward connection whose follower names its clients (origins.go): a
// request is audited from the address bound to its owner's origin, via the follower; one
// whose origin is not bound (0, forgotten, or never bound) from the connection itself, as
// before. A forced release names its operator.
func TestAuditNamesOrigins(t *testing.T) {
	var buf bytes.Buffer
	audit := hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true, Level: hclog.Info})
	h := newHarness(t, func(c *Config) { c.Audit = audit })
	r := &recorder{}
	link := h.n.AttachForward(r, "peer 127.0.0.1:40000", "n2")
	h.n.BindOrigin(link, 1, "10.0.0.5:51234")
	h.n.BindOrigin(link, 2, "10.0.0.6:51235")
	h.n.BindOrigin(link, 0, "10.0.0.7:1") // no origin: ignored

	h.acquire(link, OriginOwner(1, 1), "a", 0, 30)
	want(t, r.one(t), wire.OpAcquire, OriginOwner(1, 1))
	h.acquire(link, OriginOwner(2, 2), "b", 0, 30)
	tokB := want(t, r.one(t), wire.OpAcquire, OriginOwner(2, 2)).Token
	h.acquire(link, OriginOwner(0, 3), "c", 0, 30) // a request of no origin
	want(t, r.one(t), wire.OpAcquire, OriginOwner(0, 3))
	h.n.ForgetOrigin(link, 2)
	h.n.Release(link, OriginOwner(2, 4), []byte("b"), tokB) // forgotten: the connection's own
	want(t, r.one(t), wire.OpRelease, OriginOwner(2, 4))
	h.n.ForceReleaseBy([]byte("a"), 0, Operator{Addr: "192.0.2.9:4000", Via: "n3", Cred: "admin secret 0123456789abcdef"}, func(uint64, error) {})

	var got []string
	for _, l := range jsonLines(t, buf.String()) {
		got = append(got, fmt.Sprintf("%v %v from=%v via=%v cred=%v", l["event"], l["key"], l["from"], l["via"], l["cred"]))
	}
	wantLines := []string{
		"grant a from=10.0.0.5:51234 via=n2 cred=<nil>",
		"grant b from=10.0.0.6:51235 via=n2 cred=<nil>",
		"grant c from=peer 127.0.0.1:40000 via=<nil> cred=<nil>",
		"release b from=peer 127.0.0.1:40000 via=<nil> cred=<nil>",
		"force_release a from=operator 192.0.2.9:4000 via=n3 cred=admin secret 0123456789abcdef",
	}
	if strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Fatalf("audit trail:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
}
