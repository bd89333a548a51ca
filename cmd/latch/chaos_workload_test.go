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
// server had not expired it yet).
//
// The first spec.Extenders workers keep their locks by extending instead (protocol revision
// 2): each grant has a lease of spec.ExtendLease to 2 s more and is held for 2 to 4 leases,
// extended with the same lease every third of it (extend). A failed attempt is tried again
// after a short pause while the ticket's deadline allows; an N (lost) or a deadline that
// passed unconfirmed ends the hold, and the worker releases anyway after the deadline. At the
// end of the hold it releases (most often), or stops extending and lets the extended lease
// run out, as a holder that died. An extend answered unsupported (the cluster does not serve
// revision 2) ends the hold at once and is logged the first time.
//
// Every call is recorded with its invocation and answer on the recorder's clock, grants with
// their Ticket.Deadline, releases at the moment they are sent with the ticket's
// CurrentDeadline, extends with the ticket's CurrentDeadline right after the answer.
type chaosWorkload struct {
	rec         *history.Recorder
	stopping    atomic.Bool
	quit        chan struct{} // closed by stop: ends the extenders' sleeps
	wg          sync.WaitGroup
	lastGrant   atomic.Int64 // the recorder time of the latest grant answered
	unsupported atomic.Int64 // extends answered unsupported
	log         hclog.Logger
}

// maxChaosOps bounds each worker's operations, whatever the duration; maxChaosExtends the
// extend attempts of one hold (each waits at least chaosExtendRetry first, and the hold lasts
// 4 leases at most, so a hold makes far fewer).
const (
	maxChaosOps      = 100000
	maxChaosExtends  = 1000
	chaosExtendRetry = 100 * time.Millisecond
)

// startChaosWorkload starts spec.Workers contending workers and the probe (worker
// spec.Workers); worker i's client is given the servers serversOf(i) (rotated gives every
// worker all of them). Of spec it uses Secret, Seed, Workers, Keys, Lease, Wait and
// ProbeEvery, Extenders and ExtendLease.
func startChaosWorkload(spec chaosSpec, serversOf func(worker int) []string, rec *history.Recorder, log hclog.Logger) *chaosWorkload {
	w := &chaosWorkload{rec: rec, log: log, quit: make(chan struct{})}
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
			switch {
			case i == spec.Workers:
				w.probe(cl, i, spec)
			case i < spec.Extenders:
				w.extendHolds(cl, i, rng, spec)
			default:
				w.contend(cl, i, rng, spec)
			}
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
	close(w.quit)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		w.log.Error("workers still running 30 s after the stop")
	}
}

// Unsupported is how many extends were answered unsupported.
func (w *chaosWorkload) Unsupported() int64 { return w.unsupported.Load() }

// sleepUntil sleeps until t or the stop, and reports whether it was not stopped.
func (w *chaosWorkload) sleepUntil(t time.Time) bool {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
		return !w.stopping.Load()
	case <-w.quit:
		return false
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
		Deadline: w.rec.Rel(tk.CurrentDeadline()), Start: w.rec.Now()}
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

// extend extends tk by lease and records it, with the ticket's deadline right after the
// answer.
func (w *chaosWorkload) extend(tk *client.Ticket, worker int, lease time.Duration) history.Result {
	op := history.Op{Worker: worker, Kind: history.Extend, Key: tk.Key, Token: tk.Token, Lease: lease, Start: w.rec.Now()}
	err := tk.Extend(context.Background(), lease) // bounded by the client's IOTimeout and the ticket's deadline
	op.End = w.rec.Now()
	op.Deadline = w.rec.Rel(tk.CurrentDeadline())
	op.Result, op.Why = chaosResult(err)
	if err != nil {
		op.Err = err.Error()
	}
	if op.Result == history.Unsupported && w.unsupported.Add(1) == 1 {
		w.log.Warn("an extend was answered unsupported: the cluster does not serve protocol revision 2 (its feature switch is off, or the connections predate it); holders keep their first lease",
			"worker", worker, "error", err)
	}
	w.rec.AddOp(op)
	return op.Result
}

// extendHolds is an extending worker (see chaosWorkload).
func (w *chaosWorkload) extendHolds(cl *client.Client, worker int, rng *rand.Rand, spec chaosSpec) {
	for n := 0; n < maxChaosOps && !w.stopping.Load(); n++ {
		key := fmt.Sprintf("chaos/%d", rng.IntN(spec.Keys))
		lease := spec.ExtendLease + time.Duration(rng.IntN(3))*time.Second
		tk, res := w.acquire(cl, worker, key, client.AcquireOptions{Wait: spec.Wait, Lease: lease})
		if res != history.OK {
			time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
			continue
		}
		held := w.keep(tk, worker, lease, time.Now().Add(lease*time.Duration(2+rng.IntN(3))))
		switch {
		case !held: // lost, or its deadline passed unconfirmed: release anyway after the deadline
			w.sleepUntil(tk.CurrentDeadline().Add(time.Duration(rng.IntN(400)) * time.Millisecond))
			w.release(tk, worker)
		case rng.IntN(4) == 0 && !w.stopping.Load(): // it dies: the extended lease runs out
			w.sleepUntil(tk.CurrentDeadline().Add(100 * time.Millisecond))
		default:
			w.release(tk, worker)
		}
	}
}

// keep extends tk by lease every third of it until `until` (or the stop), and reports whether
// the ticket still holds by its deadline then. It ends early, holding, when an extend is
// answered unsupported; not holding when one is answered N or the ticket ended, or when the
// deadline passes before an extension is confirmed.
func (w *chaosWorkload) keep(tk *client.Ticket, worker int, lease time.Duration, until time.Time) bool {
	holds := func() bool { return time.Now().Before(tk.CurrentDeadline()) }
	every := lease / 3
	next := time.Now().Add(every)
	for range maxChaosExtends {
		if !next.Before(until) {
			end := tk.CurrentDeadline()
			if until.Before(end) {
				end = until
			}
			w.sleepUntil(end)
			return holds()
		}
		if !w.sleepUntil(next) || !holds() {
			return holds()
		}
		start := time.Now()
		switch w.extend(tk, worker, lease) {
		case history.OK:
			next = start.Add(every)
		case history.Unsupported:
			return holds()
		case history.NotHeld, history.Ended:
			return false
		default: // not extended, or unknown: the deadline stands (or is earlier); try again
			next = time.Now().Add(chaosExtendRetry)
		}
	}
	return holds()
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
	case errors.Is(err, client.ErrNotHeld): // an extend's N too (ErrTicketLost)
		return history.NotHeld, ""
	case errors.Is(err, client.ErrUnsupported):
		if strings.Contains(err.Error(), "no connection of the pool carries") {
			return history.Unsupported, "nothing sent: no connection carries revision 2"
		}
		return history.Unsupported, "answered E unsupported"
	case errors.Is(err, client.ErrTicketEnded), errors.Is(err, client.ErrTicketLost), errors.Is(err, client.ErrTicketUnconfirmed):
		return history.Ended, ""
	}
	return history.Other, strings.SplitN(err.Error(), ":", 2)[0]
}

// indeterminateWhy names the cause in an ErrIndeterminate message of package client.
func indeterminateWhy(msg string) string {
	for _, c := range []struct{ sub, why string }{
		{"lost after", "connection lost after the request may have been sent"},
		{"answered E indeterminate", "server answered E indeterminate"},
		{"after an earlier attempt", "no answer after a resend"},
		{"carries protocol revision 2 now", "no revised connection left to resend the extend on"},
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
