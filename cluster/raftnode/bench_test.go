package raftnode

import (
	"bytes"
	"context"
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
	c := newTCPCluster(b, 3, nil)
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

// BenchmarkBackupRestore measures a backup and a restore of a three-node cluster holding
// keys locks (loopback TCP, every log and snapshot synced to disk): the backup's size, the
// time Backup takes on the leader, and the time Restore takes until every member has
// installed it and the entry after it has committed.
//
//	go test -run '^$' -bench BackupRestore -benchtime 1x ./cluster/raftnode/
func BenchmarkBackupRestore(b *testing.B) {
	for _, keys := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			c := newTCPCluster(b, 3, nil)
			l := c.leader()
			var wg sync.WaitGroup
			var failed atomic.Int64
			window := make(chan struct{}, 2048) // below the proposer's MaxQueue
			for i := range keys {
				wg.Add(1)
				window <- struct{}{}
				l.n.Submit(acquire(fmt.Sprintf("bench/backup/%08d", i)), func(r fsm.Result, err error) {
					if err != nil || r.Kind != fsm.Granted {
						failed.Add(1)
					}
					<-window
					wg.Done()
				})
			}
			wg.Wait()
			if failed.Load() > 0 {
				b.Fatalf("%d acquires failed", failed.Load())
			}
			var backup, restore time.Duration
			var size int
			b.ResetTimer()
			for range b.N {
				var buf bytes.Buffer
				t0 := time.Now()
				info, err := l.n.Backup(context.Background(), &buf)
				backup += time.Since(t0)
				if err != nil || info.Keys != keys {
					b.Fatalf("backup: %+v %v", info, err)
				}
				size = buf.Len()
				t0 = time.Now()
				if _, err := l.n.Restore(context.Background(), buf.Bytes(), 0); err != nil {
					b.Fatal(err)
				}
				restore += time.Since(t0)
			}
			b.ReportMetric(float64(size)/float64(keys), "B/key")
			b.ReportMetric(float64(backup.Milliseconds())/float64(b.N), "backup-ms")
			b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
		})
	}
}
