package clustertest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// FloodSpec is a flood of silent connections: N connections to Addr from the local address
// Src (empty: any) that never send a byte (they read and discard what arrives), each dialled
// again as soon as the other side closes it, until the flood stops or Budget dials have been
// made. A failed dial (refused, out of ports for a moment) is tried again after Retry.
type FloodSpec struct {
	Addr, Src string
	N         int
	Budget    int64
	Retry     time.Duration
}

// Flood is a running flood.
type Flood struct {
	Dials  atomic.Int64 // dials begun; the last round may pass Budget by up to N
	Failed atomic.Int64 // dials that failed
	Open   atomic.Int64 // connections open now

	firstErr atomic.Value // string: the first failed dial's error
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// StartFlood starts the flood s; it stops at Stop or when ctx ends.
func StartFlood(ctx context.Context, s FloodSpec) *Flood {
	ctx, cancel := context.WithCancel(ctx)
	f := &Flood{cancel: cancel}
	d := net.Dialer{Timeout: time.Second}
	if s.Src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(s.Src)}
	}
	for range s.N {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			buf := make([]byte, 512)
			for f.Dials.Add(1) <= s.Budget && ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", s.Addr)
				if err != nil {
					f.Failed.Add(1)
					f.firstErr.CompareAndSwap(nil, err.Error())
					select {
					case <-ctx.Done():
					case <-time.After(s.Retry):
					}
					continue
				}
				f.hold(ctx, c, buf)
			}
		}()
	}
	return f
}

// hold reads from c until the other side closes it or the flood stops.
func (f *Flood) hold(ctx context.Context, c net.Conn, buf []byte) {
	f.Open.Add(1)
	defer f.Open.Add(-1)
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// FirstErr is the first failed dial's error, or "".
func (f *Flood) FirstErr() string {
	s, _ := f.firstErr.Load().(string)
	return s
}

// Wait waits until every connection of the flood has ended: the budget is spent, or the
// flood stopped.
func (f *Flood) Wait() { f.wg.Wait() }

// Stop closes every connection of the flood and waits for its goroutines.
func (f *Flood) Stop() {
	f.cancel()
	f.wg.Wait()
}
