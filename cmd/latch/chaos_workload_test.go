package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest/history"
)

// chaosWorkload is the chaos lab's clients: workers contending for a few keys through the
// official client, each with a Client of its own, and one probe that takes a fresh key each
// time (it never waits behind a holder, so its grants show when the cluster serves).
//
// A contending worker, after each grant, picks one of three ways to end it: it releases
// after a short critical section (most often); it lets the lease run out and sends nothing;
// or it lets the lease run out and then sends a release anyway (answered N, or R if the
// server had not expired it yet). Every call is recorded with its invocation and answer on
// the recorder's clock, grants with their Ticket.Deadline, releases at the moment they are
// sent.
type chaosWorkload struct {
	rec       *history.Recorder
	stopping  atomic.Bool
	wg        sync.WaitGroup
	lastGrant atomic.Int64 // the recorder time of the latest grant answered
	log       hclog.Logger
}

// maxChaosOps bounds each worker's operations, whatever the duration.
const maxChaosOps = 100000

// startChaosWorkload starts spec.Workers contending workers and the probe (worker
// spec.Workers); worker i's client is given the servers serversOf(i) (rotated gives every
// worker all of them). Of spec it uses Secret, Seed, Workers, Keys, Lease, Wait and
// ProbeEvery.
func startChaosWorkload(spec chaosSpec, serversOf func(worker int) []string, rec *history.Recorder, log hclog.Logger) *chaosWorkload {
	w := &chaosWorkload{rec: rec, log: log}
	for i := range spec.Workers + 1 {
		cl, err := client.New(client.Config{Servers: serversOf(i), SecretFile: spec.Secret})
		if err != nil {
			log.Error("client", "error", err) // a bad spec: the history shows no ops
			continue
		}
		rng := rand.New(rand.NewPCG(spec.Seed, uint64(i)+1))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer cl.Close()
			if i == spec.Workers {
				w.probe(cl, i, spec)
				return
			}
			w.contend(cl, i, rng, spec)
		}()
	}
	return w
}

// rotated gives every worker all of servers, each starting its connections at another.
func rotated(servers []string) func(worker int) []string {
	return func(i int) []string {
		return append(append([]string(nil), servers[i%len(servers):]...), servers[:i%len(servers)]...)
	}
}

// stop lets every worker finish its call in progress (each is bounded by its wait, the
// client's reply grace and a lease) and waits for them, 30 s at most.
func (w *chaosWorkload) stop() {
	if w.stopping.Swap(true) {
		return
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		w.log.Error("workers still running 30 s after the stop")
	}
}

// LastGrant is when the latest grant was answered, on the recorder's clock.
func (w *chaosWorkload) LastGrant() time.Duration { return time.Duration(w.lastGrant.Load()) }

// acquire makes one acquire and records it.
func (w *chaosWorkload) acquire(cl *client.Client, worker int, key string, o client.AcquireOptions) (*client.Ticket, history.Result) {
	start := w.rec.Now()
	tk, err := cl.Acquire(context.Background(), key, 0, o)
	op := history.Op{Worker: worker, Kind: history.Acquire, Key: key, Start: start, End: w.rec.Now()}
	op.Result, op.Why = chaosResult(err)
	if err != nil {
		op.Err = err.Error()
	} else {
		op.Token, op.Deadline = tk.Token, w.rec.Rel(tk.Deadline)
		for { // keep the latest
			last := w.lastGrant.Load()
			if int64(op.End) <= last || w.lastGrant.CompareAndSwap(last, int64(op.End)) {
				break
			}
		}
	}
	w.rec.AddOp(op)
	return tk, op.Result
}

// release releases tk and records it, sent now.
func (w *chaosWorkload) release(tk *client.Ticket, worker int) {
	op := history.Op{Worker: worker, Kind: history.Release, Key: tk.Key, Token: tk.Token,
		Deadline: w.rec.Rel(tk.Deadline), Start: w.rec.Now()}
	err := tk.Release(context.Background())
	op.End = w.rec.Now()
	op.Result, op.Why = chaosResult(err)
	if err != nil {
		op.Err = err.Error()
		// The client says so when an N answered a resend (Client.Release).
		op.Resent = errors.Is(err, client.ErrNotHeld) && strings.Contains(op.Err, "answered to a resend")
	}
	w.rec.AddOp(op)
}

func (w *chaosWorkload) contend(cl *client.Client, worker int, rng *rand.Rand, spec chaosSpec) {
	for n := 0; n < maxChaosOps && !w.stopping.Load(); n++ {
		key := fmt.Sprintf("chaos/%d", rng.IntN(spec.Keys))
		lease := spec.Lease + time.Duration(rng.IntN(2))*time.Second
		tk, res := w.acquire(cl, worker, key, client.AcquireOptions{Wait: spec.Wait, Lease: lease})
		if res != history.OK {
			time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
			continue
		}
		switch p := rng.IntN(10); {
		case p < 6: // a critical section, then release
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			w.release(tk, worker)
		case p < 8: // let the lease run out
			time.Sleep(time.Until(tk.Deadline) + 100*time.Millisecond)
		default: // let it run out, then release anyway
			time.Sleep(time.Until(tk.Deadline) + time.Duration(rng.IntN(400))*time.Millisecond)
			w.release(tk, worker)
		}
	}
}

func (w *chaosWorkload) probe(cl *client.Client, worker int, spec chaosSpec) {
	for n := 0; n < maxChaosOps && !w.stopping.Load(); n++ {
		tk, res := w.acquire(cl, worker, fmt.Sprintf("chaos/probe/%d", n), client.AcquireOptions{Wait: time.Second, Lease: spec.Lease})
		if res == history.OK {
			w.release(tk, worker)
		}
		time.Sleep(spec.ProbeEvery)
	}
}

// chaosResult classifies a client error for the history: its result and, when it is not a
// grant or a release, a short cause.
func chaosResult(err error) (history.Result, string) {
	switch {
	case err == nil:
		return history.OK, ""
	case errors.Is(err, client.ErrIndeterminate):
		return history.Indeterminate, indeterminateWhy(err.Error())
	case errors.Is(err, client.ErrUnavailable): // before Timeout: unreachable is both
		return history.Unavailable, ""
	case errors.Is(err, client.ErrTimeout):
		return history.Timeout, ""
	case errors.Is(err, client.ErrBusy):
		return history.Busy, ""
	case errors.Is(err, client.ErrNotHeld):
		return history.NotHeld, ""
	}
	return history.Other, strings.SplitN(err.Error(), ":", 2)[0]
}

// indeterminateWhy names the cause in an ErrIndeterminate message of package client.
func indeterminateWhy(msg string) string {
	for _, c := range []struct{ sub, why string }{
		{"lost after", "connection lost after the request may have been sent"},
		{"answered E indeterminate", "server answered E indeterminate"},
		{"after an earlier attempt", "no answer after a resend"},
		{"no answer from", "no answer by the deadline (connection closed)"},
		{"after the deadline", "grant arrived after the deadline (released in the background)"},
		{"min work budget", "grant with too little lease left (released in the background)"},
		{"canceled", "canceled"},
		{"client closed", "client closed"},
	} {
		if strings.Contains(msg, c.sub) {
			return c.why
		}
	}
	return "other"
}
