package server_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Section 2: any number of pipelined requests; every request gets exactly one response,
// matched by owner, in any order.

// exchange is a batch of frames and the answer each owner must get.
type exchange struct {
	frames [][]byte
	want   map[uint64]wire.Op
}

func (x *exchange) add(frame []byte, owner uint64, op wire.Op) {
	if _, dup := x.want[owner]; dup {
		panic(fmt.Sprintf("owner %d used twice in one exchange", owner))
	}
	x.frames = append(x.frames, frame)
	x.want[owner] = op
}

// run writes the frames with write (from another goroutine, while this one reads) and
// checks that every owner gets exactly its answer. It returns the A responses by owner.
func (x *exchange) run(t *testing.T, c *wiretest.Conn, write func([]byte) error) map[uint64]uint64 {
	t.Helper()
	buf := wiretest.Concat(x.frames...)
	werr := make(chan error, 1)
	go func() { werr <- write(buf) }()
	tokens := map[uint64]uint64{}
	seen := make(map[uint64]bool, len(x.want))
	for range x.want {
		r := c.Next(t)
		op, ok := x.want[r.Owner]
		switch {
		case !ok:
			t.Fatalf("answer %s for an owner never sent", wiretest.Describe(r))
		case seen[r.Owner]:
			t.Fatalf("second answer %s for owner %d", wiretest.Describe(r), r.Owner)
		case r.Op != op:
			t.Fatalf("answer %s for owner %d, want %v", wiretest.Describe(r), r.Owner, op)
		}
		seen[r.Owner] = true
		if r.Op == wire.OpAcquire {
			tokens[r.Owner] = r.Token
		}
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing %d bytes: %v", len(buf), err)
	}
	c.ExpectSilent(t, 100*time.Millisecond) // nothing more than one answer each
	return tokens
}

// oneWrite writes b in a single write.
func oneWrite(c *wiretest.Conn) func([]byte) error {
	return func(b []byte) error { return c.Write(b, wiretest.WriteTimeout) }
}

// randomWrites writes b in pieces of 1..300 bytes, so that frames and their headers (full of
// 0x0A) are split everywhere across the server's reads.
func randomWrites(c *wiretest.Conn, rng *rand.Rand) func([]byte) error {
	sizes := make([]int, 0, 1024)
	return func(b []byte) error {
		for len(b) > 0 {
			if len(sizes) == 0 {
				for range cap(sizes) {
					sizes = append(sizes, 1+rng.IntN(300))
				}
			}
			n := min(sizes[0], len(b))
			sizes = sizes[1:]
			if err := c.Write(b[:n], wiretest.WriteTimeout); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	}
}

// lockBatch is n acquires of fresh keys, pings, acquires of a held key (T) and releases
// nobody holds (N): 4n frames. Owners start at base.
func lockBatch(base uint64, prefix string, n int) *exchange {
	x := &exchange{want: map[uint64]wire.Op{}}
	for i := range uint64(n) {
		x.add(wiretest.Acquire(base+4*i, 0, 60, fmt.Sprintf("%s/%d", prefix, i)), base+4*i, wire.OpAcquire)
		x.add(wiretest.Ping(base+4*i+1), base+4*i+1, wire.OpPing)
		x.add(wiretest.Acquire(base+4*i+2, 0, 60, prefix+"/held"), base+4*i+2, wire.OpTimeout)
		x.add(wiretest.Release(base+4*i+3, 1<<40+i, prefix+"/nobody"), base+4*i+3, wire.OpNotHeld)
	}
	return x
}

// releaseBatch releases every key lockBatch granted, with its token.
func releaseBatch(base uint64, prefix string, tokens map[uint64]uint64, lockBase uint64, n int) *exchange {
	x := &exchange{want: map[uint64]wire.Op{}}
	for i := range uint64(n) {
		x.add(wiretest.Release(base+i, tokens[lockBase+4*i], fmt.Sprintf("%s/%d", prefix, i)), base+i, wire.OpRelease)
	}
	return x
}

func holdKey(t *testing.T, c *wiretest.Conn, key string) uint64 {
	t.Helper()
	c.Send(t, wiretest.Acquire(1<<62, 0, 600, key))
	return c.ExpectGrant(t, 1<<62)
}

func distinctTokens(t *testing.T, tokens map[uint64]uint64, above uint64) {
	t.Helper()
	seen := map[uint64]uint64{}
	for owner, tok := range tokens {
		if tok <= above {
			t.Fatalf("owner %d got token %d, not above %d", owner, tok, above)
		}
		if o, dup := seen[tok]; dup {
			t.Fatalf("token %d granted to owners %d and %d", tok, o, owner)
		}
		seen[tok] = owner
	}
}

func TestPipelineThousandsOfFrames(t *testing.T) {
	ts := startServer(t)
	c := ts.dial(t)
	held := holdKey(t, c, "p/held")
	const n = 1250 // 5000 frames in one write
	lock := lockBatch(1, "p", n)
	tokens := lock.run(t, c, oneWrite(c))
	distinctTokens(t, tokens, held)
	if st := ts.node.Stats(); st.Keys != n+1 || st.LastToken != held+n {
		t.Fatalf("stats %+v, want %d keys and last token %d", st, n+1, held+n)
	}
	releaseBatch(1<<32, "p", tokens, 1, n).run(t, c, oneWrite(c))
	if st := ts.node.Stats(); st.Keys != 1 {
		t.Fatalf("%d keys after releasing all, want 1", st.Keys)
	}
}

// The same frames, split at random points: decoding must not depend on read boundaries.
func TestPipelineRandomSplits(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x0A0A0A0A))
	ts := startServer(t)
	c := ts.dial(t)
	held := holdKey(t, c, "s/held")
	// Owners full of 0x0A bytes, and keys up to 128 bytes (146-byte releases).
	const base = 0x0A0A0A0A00000000
	const n = 600
	lock := lockBatch(base, "s", n)
	long := fmt.Sprintf("%0128d", 0)
	lock.add(wiretest.Acquire(base-1, 0x0A, 0x0A0A, long), base-1, wire.OpAcquire)
	tokens := lock.run(t, c, randomWrites(c, rng))
	distinctTokens(t, tokens, held)
	rel := releaseBatch(base+0x0A000000, "s", tokens, base, n)
	rel.add(wiretest.Release(base-2, tokens[base-1], long), base-2, wire.OpRelease)
	rel.run(t, c, randomWrites(c, rng))
}

// Several connections pipelining at once, reusing the same owners: each gets exactly its
// own answers, and tokens are unique across all of them.
func TestPipelineManyConnections(t *testing.T) {
	ts := startServer(t)
	const conns, n = 6, 300
	results := make([]map[uint64]uint64, conns)
	t.Run("conns", func(t *testing.T) {
		for i := range conns {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				c := ts.dial(t)
				prefix := fmt.Sprintf("m%d", i)
				holdKey(t, c, prefix+"/held")
				x := lockBatch(1, prefix, n) // the same owners on every connection
				results[i] = x.run(t, c, oneWrite(c))
				releaseBatch(1<<32, prefix, results[i], 1, n).run(t, c, oneWrite(c))
			})
		}
	})
	all := map[uint64]uint64{}
	for i, tokens := range results {
		for owner, tok := range tokens {
			all[uint64(i)<<48|owner] = tok
		}
	}
	if len(all) != conns*n {
		t.Fatalf("%d grants, want %d", len(all), conns*n)
	}
	distinctTokens(t, all, 0)
}
