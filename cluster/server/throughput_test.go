package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/wire"
)

// BenchmarkPipelinedPairs measures single-mode throughput over loopback TCP with pipelining:
// each of `conns` connections writes 64 acquires of distinct keys in one write, reads the 64
// grants, writes the 64 releases, reads those, and repeats. Reported as pairs/s.
//
//	go test -run='^$' -bench=PipelinedPairs -benchtime=5s ./cluster/server/
func BenchmarkPipelinedPairs(b *testing.B) {
	for _, conns := range []int{1, 4, 16} {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) { pipelinedPairs(b, conns) })
	}
}

func pipelinedPairs(b *testing.B, conns int) {
	const batch = wire.ReplyBatch
	node, err := cluster.NewNode(cluster.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Config{}, node)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()

	rounds := b.N/(conns*batch) + 1
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	b.ResetTimer()
	start := time.Now()
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pipelineConn(ln.Addr().String(), c, rounds, batch); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	pairs := rounds * conns * batch
	b.ReportMetric(float64(pairs)/elapsed.Seconds(), "pairs/s")
	b.ReportMetric(0, "ns/op")
}

func pipelineConn(addr string, id, rounds, batch int) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Minute))
	r := bufio.NewReaderSize(nc, 64<<10)
	dec := wire.NewResponseDecoder()
	next := func() (*wire.Response, error) {
		for {
			p, err := r.Peek(1)
			if err != nil {
				return nil, err
			}
			n, done, err := dec.Decode(p[:min(len(p), r.Buffered())])
			r.Discard(n)
			if err != nil {
				return nil, err
			}
			if done {
				return dec.Response(), nil
			}
		}
	}
	nonce, _ := wire.NewNonce()
	if _, err := nc.Write(wire.AppendRequest(nil, &wire.Request{Op: wire.OpHello, Hello: wire.Hello{Version: wire.Version, Nonce: nonce}})); err != nil {
		return err
	}
	if _, err := next(); err != nil {
		return err
	}
	keys := make([][]byte, batch)
	for i := range keys {
		keys[i] = []byte("pipe/" + strconv.Itoa(id) + "/" + strconv.Itoa(i))
	}
	tokens := make([]uint64, batch)
	buf := make([]byte, 0, batch*wire.MaxFrame)
	owner := uint64(1)
	for range rounds {
		buf = buf[:0]
		for i := range keys {
			buf = wire.AppendRequest(buf, &wire.Request{Op: wire.OpAcquire, Owner: owner + uint64(i), Lease: 30, Key: keys[i]})
		}
		if err := pipeline(nc, buf, batch, wire.OpAcquire, next, func(resp *wire.Response) {
			tokens[resp.Owner-owner] = resp.Token
		}); err != nil {
			return err
		}
		buf = buf[:0]
		for i := range keys {
			buf = wire.AppendRequest(buf, &wire.Request{Op: wire.OpRelease, Owner: owner + uint64(i), Token: tokens[i], Key: keys[i]})
		}
		if err := pipeline(nc, buf, batch, wire.OpRelease, next, func(*wire.Response) {}); err != nil {
			return err
		}
		owner += uint64(batch)
	}
	return nil
}

// pipeline writes buf (n pipelined requests) to nc and reads the n responses with next,
// each of which must be op, handing each to got.
func pipeline(nc net.Conn, buf []byte, n int, op wire.Op, next func() (*wire.Response, error), got func(*wire.Response)) error {
	if _, err := nc.Write(buf); err != nil {
		return err
	}
	for range n {
		resp, err := next()
		if err != nil {
			return err
		}
		if resp.Op != op {
			return errUnexpectedErr(resp)
		}
		got(resp)
	}
	return nil
}

func errUnexpectedErr(r *wire.Response) error {
	return fmt.Errorf("unexpected response %s owner %d reason %q", r.Op, r.Owner, r.Reason)
}
