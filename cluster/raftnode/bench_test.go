package raftnode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchd/latch/fsm"
)

// BenchmarkSubmit3Nodes measures the proposer on a 3-node cluster over loopback TCP with
// raft-boltdb fsyncing in a temp directory: closed-loop clients, each alternating an
// acquire and a release of its own key and submitting the next command from the previous
// one's done. It reports submits per second and commands per raft entry.
//
//	go test -run '^$' -bench Submit3Nodes -benchtime 20000x ./cluster/raftnode/
func BenchmarkSubmit3Nodes(b *testing.B) {
	for _, clients := range []int{1, 16, 256, 2048} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchSubmit(b, clients) })
	}
}

func benchSubmit(b *testing.B, clients int) {
	c := newCluster(b, 3, nil)
	n := c.leader().n
	startIndex := n.raft.LastIndex()

	var (
		remaining atomic.Int64
		wg        sync.WaitGroup
		errMu     sync.Mutex
		firstErr  error
	)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		key := fmt.Sprintf("client-%d", i)
		var step func(tok fsm.Token)
		step = func(tok fsm.Token) {
			if remaining.Add(-1) < 0 {
				wg.Done()
				return
			}
			cmd := acquire(key)
			if tok != 0 {
				cmd = release(key, tok)
			}
			n.Submit(cmd, func(r fsm.Result, err error) {
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					wg.Done()
					return
				}
				if r.Kind == fsm.Granted {
					step(r.Token)
				} else {
					step(0)
				}
			})
		}
		step(0)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("benchmark clients did not finish")
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatalf("submit failed: %v", firstErr)
	}
	entries := n.raft.LastIndex() - startIndex
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "submits/s")
	b.ReportMetric(float64(b.N)/float64(max(entries, 1)), "cmds/entry")
}
