// Package behaviour is one suite of protocol behaviour that must hold in every mode: single
// mode, the in-process replicated stack and real processes each run the same cases through
// Run against a Target they start (the pattern of etcd's tests/common). It speaks the raw
// protocol with wiretest, so a case sees exactly what a client on the socket sees.
//
// It is imported only by _test.go files. A case that needs something one mode has and the
// others lack (a token floor, a sweep interval, a node's gauges) belongs with that mode's own
// tests, not here.
package behaviour

import (
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Target is a running latch service, ready to serve: in cluster mode it has a leader and
// every node is ready before Run is called.
type Target interface {
	// Addrs are the client addresses. The suite dials them in turn, so with several nodes the
	// connections of one case go through different nodes (followers and the leader).
	Addrs() []string
	// Secret is what clients prove with in the handshake; nil when the target asks for none.
	Secret() []byte
	// Waiters is how many acquires wait behind a holder, summed over every node (only the
	// node that decides queues them). Cases use it to know that a waiter is queued before
	// the next one is sent.
	Waiters(t *testing.T) int
}

// Nodes is a Target made of its parts.
type Nodes struct {
	Clients []string
	Auth    []byte
	Count   func(t *testing.T) int // Waiters
}

func (n Nodes) Addrs() []string          { return n.Clients }
func (n Nodes) Secret() []byte           { return n.Auth }
func (n Nodes) Waiters(t *testing.T) int { return n.Count(t) }

// Slack is added to every protocol time bound a case asserts from above; with forwarding and
// elections the answers may be late, and late is not wrong.
const Slack = 5 * time.Second

// waitFor bounds every poll of the target's gauges.
const waitFor = 30 * time.Second

// Run runs every case against tg, one after another (the cases that count waiters need
// the target to themselves). Keys are prefixed with the case's name, so the cases share no
// key, and Run may be called more than once on one target.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if len(tg.Addrs()) == 0 {
		t.Fatal("behaviour: the target has no client addresses")
	}
	s := &suite{tg: tg}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.prefix = c.name + "/"
			c.run(t, s)
		})
	}
}

// suite is what cases share: the target and which address the next dial uses.
type suite struct {
	tg     Target
	next   int
	prefix string
}

// dial connects to the next address in turn and makes the handshake.
func (s *suite) dial(t *testing.T) *wiretest.Conn {
	t.Helper()
	addrs := s.tg.Addrs()
	addr := addrs[s.next%len(addrs)]
	s.next++
	c := wiretest.Dial(t, addr)
	c.Hello(t, s.tg.Secret())
	return c
}

// key is name within the running case's own key space.
func (s *suite) key(name string) string { return s.prefix + name }

// waitWaiters polls until exactly n acquires wait on the target.
func (s *suite) waitWaiters(t *testing.T, n int) {
	t.Helper()
	clustertest.Eventually(t, waitFor, "waiters on the target", func() bool { return s.tg.Waiters(t) == n })
}

// resp is the response op with owner (T, R, N, P).
func resp(op wire.Op, owner uint64) wire.Response { return wire.Response{Op: op, Owner: owner} }

// release releases k, held with tok, on c, which must be answered R.
func release(t *testing.T, c *wiretest.Conn, owner, tok uint64, k string) {
	t.Helper()
	c.Send(t, wiretest.Release(owner, tok, k))
	c.Expect(t, resp(wire.OpRelease, owner))
}
