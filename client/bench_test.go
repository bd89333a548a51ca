package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkAcquireRelease measures pipelined acquire+release pairs of distinct keys through
// one client against a real in-process server.
func BenchmarkAcquireRelease(b *testing.B) {
	rs := startRealB(b)
	cl, err := New(Config{Servers: []string{rs}, Conns: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var n atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench/%d", n.Add(1))
		for pb.Next() {
			tk, err := cl.Acquire(ctx, key, 0, AcquireOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			if err := tk.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
