package server_test

import (
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/servertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// withAudit turns the node's audit trail on (to io.Discard).
func withAudit(o *options) {
	o.node.Audit = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Info})
}

// originFrame is a follower's bind (addr set) or forget of origin id (cluster/origins.go).
func originFrame(id uint64, addr string) []byte { return wiretest.Release(0, id, addr) }

// The origins probe (cluster/origins.go): a forward link of a node that audits says yes and
// from then on takes origin frames, which it answers with nothing; requests whose owner
// carries an origin are answered with that owner.
func TestPeerSessionTakesOriginsWhenAuditing(t *testing.T) {
	ts := startServer(t, withAudit)
	c := wiretest.Dial(t, servertest.ServePeers(t, ts.srv))
	c.Send(t, wiretest.Ping(cluster.OriginsAsk))
	c.ExpectOp(t, wire.OpPing, cluster.OriginsYes)
	owner := cluster.OriginOwner(1, 1)
	c.Send(t, originFrame(1, "10.0.0.5:51234"), wiretest.Acquire(owner, 0, 60, "k"))
	tok := c.ExpectGrant(t, owner) // the bind had no answer: the grant is the next frame
	c.Send(t, originFrame(1, ""), wiretest.Release(cluster.OriginOwner(1, 2), tok, "k"))
	c.ExpectOp(t, wire.OpRelease, cluster.OriginOwner(1, 2))
	c.Alive(t, 3)
}

// Without an audit trail the probe is answered as every ping is (its own owner), and an
// origin frame is what it always was: a release with owner 0, answered E bad_owner. A
// client connection is never asked into origins, auditing or not: the client protocol does
// not change.
func TestOriginsOffAnswersAsBefore(t *testing.T) {
	quiet := startServer(t)
	c := wiretest.Dial(t, servertest.ServePeers(t, quiet.srv))
	c.Send(t, wiretest.Ping(cluster.OriginsAsk))
	c.ExpectOp(t, wire.OpPing, cluster.OriginsAsk)
	c.Send(t, originFrame(1, "10.0.0.5:51234"))
	c.Expect(t, errResp(0, wire.ReasonBadOwner))

	auditing := startServer(t, withAudit)
	cl := auditing.dial(t)
	cl.Send(t, wiretest.Ping(cluster.OriginsAsk))
	cl.ExpectOp(t, wire.OpPing, cluster.OriginsAsk)
	cl.Send(t, originFrame(1, "k"))
	cl.Expect(t, errResp(0, wire.ReasonBadOwner))
}
