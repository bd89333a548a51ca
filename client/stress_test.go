package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRealStress runs many concurrent acquires and releases against a real server while
// the connections are cut again and again. Every call must end within its bound with a known
// result, a key is never granted to two tickets at once, and nothing leaks.
func TestRealStress(t *testing.T) {
	t.Parallel() // waits in real time
	rs := startReal(t, nil)
	p := newProxy(t, rs.addr, nil)
	cl := newTestClient(t, Config{Servers: []string{p.addr}, Conns: 3})

	stop := make(chan struct{})
	var cutter sync.WaitGroup
	cutter.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(60 * time.Millisecond):
				p.cut()
			}
		}
	})

	const workers, rounds, keys = 40, 25, 5
	var holders [keys]atomic.Int32
	var granted, other atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				k := (w + r) % keys
				key := fmt.Sprintf("stress/%d", k)
				wait := time.Duration((w+r)%3) * 500 * time.Millisecond
				limit := wait + 2*ReplyGrace + 3*time.Second
				if wait == 0 {
					limit = IOTimeout + 3*time.Second
				}
				start := time.Now()
				tk, err := cl.Acquire(context.Background(), key, time.Second, AcquireOptions{Wait: wait, Lease: 10 * time.Second})
				if d := time.Since(start); d > limit {
					t.Errorf("Acquire(wait %v) took %v", wait, d)
				}
				if err != nil {
					if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrIndeterminate) && !errors.Is(err, ErrUnavailable) {
						t.Errorf("Acquire: unexpected %v", err)
					}
					other.Add(1)
					continue
				}
				granted.Add(1)
				if n := holders[k].Add(1); n != 1 {
					t.Errorf("key %s granted to %d tickets at once", key, n)
				}
				time.Sleep(2 * time.Millisecond)
				holders[k].Add(-1)
				start = time.Now()
				err = tk.Release(context.Background())
				if d := time.Since(start); d > IOTimeout+3*time.Second {
					t.Errorf("Release took %v", d)
				}
				if err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrIndeterminate) && !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrUnavailable) {
					t.Errorf("Release: unexpected %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	cutter.Wait()
	st := cl.Stats()
	t.Logf("granted %d, other %d; stats %+v", granted.Load(), other.Load(), st)
	if granted.Load() == 0 || st.Reconnects == 0 {
		t.Fatalf("the stress did not exercise grants and reconnects")
	}
}
