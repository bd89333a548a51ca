package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchd/latch/client"
)

// DefaultHoldConcurrency bounds the holders' acquires (and their releases at the end) in
// flight at once: enough to take 10,000 keys in a second or two, few enough to stay well
// inside a client's local queue (client.DefaultQueueSize).
const DefaultHoldConcurrency = 256

// Holders are the extenders of a run: each acquires a key of its own once, before the
// warm-up, and then extends it every Every until the window closes, alongside the pair
// workers; then all release. They measure what keeping many locks alive costs the pairs.
type Holders struct {
	// Count is how many holders; 0: none. Holder i holds the key Prefix + "hold/" + i (the
	// run's Prefix), which no pair worker uses.
	Count int
	// Client is the one client all holders share: its Config.Conns connections carry every
	// acquire and extend (many holders, few descriptors). Its connections must carry protocol
	// revision 2, or every extend fails with client.ErrUnsupported.
	Client *client.Client
	// Every is how often each holder extends; Count/Every extends go out per second. Holder
	// i's moment is i/Count of the way into each period, moved back onto the keep-alive grid
	// (client.KeepAliveStart), as Ticket.KeepAlive puts the extends of one client: holders due
	// within one step of the grid extend together.
	Every time.Duration
	// Spread, if set, leaves each holder at its own moment, off the grid: every extend goes
	// out alone, as when each holder is a process with a client of its own.
	Spread bool
	// Lease is the lease of each holder's acquire and of every extend; it must be longer than
	// Every, or a holder's lock ends between two extends.
	Lease time.Duration
	// Wait is each holder's acquire wait (a key left held by an earlier run that died frees
	// within its lease).
	Wait time.Duration
	// Concurrency bounds the holders' acquires and releases in flight; 0 means
	// DefaultHoldConcurrency.
	Concurrency int
}

// Validate says what is wrong with hs, or nil. Without holders (Count 0) nothing is checked.
func (hs Holders) Validate() error {
	switch {
	case hs.Count < 0:
		return fmt.Errorf("%d holders: want 0 or more", hs.Count)
	case hs.Count == 0:
		return nil
	case hs.Client == nil:
		return errors.New("holders need a client")
	case hs.Every <= 0:
		return fmt.Errorf("extend period %v: want above 0", hs.Every)
	case hs.Lease < time.Second || hs.Lease > time.Hour:
		return fmt.Errorf("holders' lease %v: want 1s..1h", hs.Lease)
	case hs.Lease <= hs.Every:
		return fmt.Errorf("holders' lease %v is not longer than their extend period %v: their locks would end between two extends", hs.Lease, hs.Every)
	}
	return nil
}

// ErrNoRevision2 is Ready's error for a server that does not offer protocol revision 2: it
// cannot extend (a cluster offers the revision once its feature switch is on).
var ErrNoRevision2 = errors.New("the server does not offer protocol revision 2, so it cannot extend (a cluster offers it once its feature switch is on: see latch status)")

// Ready checks, before a run, that the holders' client reaches a server (a ping) that offers
// protocol revision 2 on its connections. Without holders it checks nothing.
func (hs Holders) Ready(ctx context.Context) error {
	if hs.Count == 0 || hs.Client == nil {
		return nil
	}
	if err := hs.Client.Ping(ctx); err != nil {
		return err
	}
	if hs.Client.Stats().ConnsRevised == 0 {
		return ErrNoRevision2
	}
	return nil
}

// holder is one holder's tally; only its own goroutine writes it until the run ends.
type holder struct {
	key     string
	t       *client.Ticket
	ext     []time.Duration // latencies of the extends made in the window
	extends int64           // extends that succeeded in the window
	failed  int64           // extends that failed, over the whole run
	missed  int64           // periods skipped because an extend took longer than Every
	errs    map[string]int64
	// lost: an extend was answered N, so the token holds nothing to release. A ticket that
	// ended otherwise (its deadline passed) extends no more but is still released, in case the
	// server holds it a little longer.
	lost bool
}

// count counts err under what and its name.
func (h *holder) count(what string, err error) {
	if h.errs == nil {
		h.errs = map[string]int64{}
	}
	h.errs[what+": "+ErrName(err)]++
}

// acquireHolders takes every holder's key, at most hs.Concurrency at once. A holder whose
// acquire fails has no ticket (and counts the error); it does not extend.
func acquireHolders(ctx context.Context, hs Holders, prefix string) []*holder {
	out := make([]*holder, hs.Count)
	for i := range out {
		out[i] = &holder{key: prefix + "hold/" + strconv.Itoa(i)}
	}
	opts := client.AcquireOptions{Wait: hs.Wait, Lease: hs.Lease}
	eachBounded(hs, out, func(h *holder) {
		t, err := hs.Client.Acquire(ctx, h.key, 0, opts)
		if err != nil {
			h.count("acquire", err)
			return
		}
		h.t = t
	})
	return out
}

// releaseHolders gives back every holder's ticket, at most hs.Concurrency at once, except a
// lost one (the server said its token holds nothing).
func releaseHolders(hs Holders, holders []*holder) {
	eachBounded(hs, holders, func(h *holder) {
		if h.t == nil || h.lost {
			return
		}
		if err := h.t.Release(context.Background()); err != nil {
			h.count("release", err)
		}
	})
}

// eachBounded runs f on every holder, at most hs.Concurrency at once, and returns when all
// have returned.
func eachBounded(hs Holders, holders []*holder, f func(*holder)) {
	n := hs.Concurrency
	if n <= 0 {
		n = DefaultHoldConcurrency
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(n, len(holders)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(holders)); i = next.Add(1) - 1 {
				f(holders[i])
			}
		})
	}
	wg.Wait()
}

// extendLoop extends h's ticket at start + offset, and every every after that, until stop is
// closed. An extend in the window counts its latency. One that takes longer than every skips
// the periods it overran (counted as missed), so a holder never has two extends in flight.
// A holder whose ticket is lost or has ended stops.
func (h *holder) extendLoop(ctx context.Context, hs Holders, start time.Time, offset time.Duration,
	measuring *atomic.Bool, stop <-chan struct{}) {
	timer := time.NewTimer(time.Until(start.Add(offset)))
	defer timer.Stop()
	next := start.Add(offset)
	for {
		select {
		case <-timer.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		on := measuring.Load()
		t0 := time.Now()
		err := h.t.Extend(ctx, hs.Lease)
		t1 := time.Now()
		switch {
		case err != nil && ctx.Err() != nil:
			return // the run was canceled: not the server's failure
		case err != nil:
			h.failed++
			h.count("extend", err)
			if errors.Is(err, client.ErrTicketLost) {
				h.lost = true
				return
			}
			if errors.Is(err, client.ErrTicketEnded) {
				return
			}
		case on && measuring.Load():
			h.extends++
			if len(h.ext) < MaxSamples {
				h.ext = append(h.ext, t1.Sub(t0))
			}
		}
		next = next.Add(hs.Every)
		if late := t1.Sub(next); late >= 0 {
			skip := late/hs.Every + 1
			h.missed += int64(skip)
			next = next.Add(skip * hs.Every)
		}
		timer.Reset(time.Until(next))
	}
}
