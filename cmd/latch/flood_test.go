package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Issue 11: 130 silent connections per node to the peer port kept the survivors of a leader
// SIGTERM from electing anyone for more than 22 s. Here 500 are held to every node's peer
// port (each dialled again as soon as the node closes it) while the leader gets SIGTERM: a
// new leader must come in the usual time, and a lock must be granted through a follower
// (a new forward connection through the flooded peer port). The flood comes from the
// members' own address (one host: only speed tells a member from a stranger) and from
// another loopback address (a stranger's own source, held to its own cap).
func TestClusterElectsUnderPeerFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine processes and holds 4,500 connections; skipped with -short")
	}
	const perNode, bound = 500, 15 * time.Second
	var base time.Duration
	for _, mode := range []struct{ name, src string }{
		{"no flood", ""},
		{"flood from the members' address", "127.0.0.1"},
		{"flood from another address", "127.0.0.2"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			tc := startTestCluster(t, 3)
			l := tc.leader()
			var floods []*silentFlood
			if mode.src != "" {
				for _, a := range tc.raft {
					floods = append(floods, holdSilent(t, a, mode.src, perNode, 500_000))
				}
				// Every flood connection dialled at least twice; and a few first-byte deadlines.
				for i, f := range floods {
					if !f.awaitDials(2*perNode, 10*time.Second) {
						t.Fatalf("flood of %s: %d dials, %d failed (first: %v)", tc.raft[i], f.dials.Load(), f.failed.Load(), f.firstErr.Load())
					}
				}
				time.Sleep(2 * time.Second)
				var open []string
				for i, f := range floods {
					open = append(open, fmt.Sprintf("n%d %d", i+1, f.open.Load()))
				}
				t.Logf("flood connections open at the SIGTERM (the node keeps at most 256 of one source): %s", strings.Join(open, ", "))
			}
			tc.procs[l].signal(t, syscall.SIGTERM)
			nl, leading, took := awaitNewLeader(t, tc, l, bound)
			f := (nl + 1) % 3
			if f == l {
				f = (f + 1) % 3
			}
			acquireThrough(t, tc.procs[f], "flood/after")
			var dials int64
			for _, fl := range floods {
				dials += fl.dials.Load()
			}
			elected := lastLogTime(t, tc.procs[nl], "leading").Sub(lastLogTime(t, tc.procs[l], "signal received"))
			t.Logf("SIGTERM to n%d; n%d leading %v later by the logs; seen leading over HTTP after %v, all ready after %v (flood dials %d); peak RSS: n%d %s, n%d %s",
				l+1, nl+1, elected.Round(time.Millisecond), leading.Round(time.Millisecond), took.Round(time.Millisecond), dials, nl+1, vmHWM(tc.procs[nl]), f+1, vmHWM(tc.procs[f]))
			<-tc.procs[l].exited
			if mode.src == "" {
				base = elected
			} else {
				t.Logf("new leader %v after the SIGTERM with 500 silent connections per node, %v without", elected.Round(time.Millisecond), base.Round(time.Millisecond))
			}
		})
	}
}

// acquireThrough acquires key through p's client port, trying again (as a client does) while
// p answers E unavailable (its forward link to a new leader is not up yet), for at most 10 s.
func acquireThrough(t *testing.T, p *proc, key string) {
	t.Helper()
	c := wiretest.Dial(t, p.listen)
	defer c.Close()
	c.Hello(t, nil)
	deadline := time.Now().Add(10 * time.Second)
	for owner := uint64(1); ; owner++ {
		r := c.Do(t, wiretest.Acquire(owner, 5, 30, key))
		switch {
		case r.Op == wire.OpAcquire:
			return
		case r.Op != wire.OpError || r.Reason != wire.ReasonUnavailable || time.Now().After(deadline):
			t.Fatalf("acquire through %s during the flood: %s", p.listen, wiretest.Describe(r))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitNewLeader polls the nodes other than old until one leads and every one of them is
// ready, within bound. It returns the leader, when it was first seen leading and when all
// were ready, both since the call.
func awaitNewLeader(t *testing.T, tc *testCluster, old int, bound time.Duration) (leader int, leading, ready time.Duration) {
	t.Helper()
	start := time.Now()
	leader = -1
	for time.Since(start) < bound {
		for i := range tc.procs {
			if i != old && tc.leading(i) {
				if leader != i {
					leader, leading = i, time.Since(start)
				}
				if tc.allReady([]int{old}) {
					return leader, leading, time.Since(start)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no new leader ready within %v of the SIGTERM (leader seen: n%d after %v)", bound, leader+1, leading)
	return -1, 0, 0
}

// lastLogTime returns the timestamp of the last JSON log line of p whose message starts
// with msg, failing the test if there is none.
func lastLogTime(t *testing.T, p *proc, msg string) time.Time {
	t.Helper()
	lines := strings.Split(p.stderr.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var l struct {
			Msg string    `json:"@message"`
			At  time.Time `json:"@timestamp"`
		}
		if json.Unmarshal([]byte(lines[i]), &l) == nil && strings.HasPrefix(l.Msg, msg) {
			return l.At
		}
	}
	t.Fatalf("%s never logged %q", p.what, msg)
	return time.Time{}
}

// vmHWM is the peak resident set size of p (VmHWM in /proc/PID/status), or "unknown".
func vmHWM(p *proc) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}

// silentFlood holds n connections to addr from the local address src that never send a byte
// (they read and discard); each is dialled again as soon as the other side closes it, until
// the test ends or budget dials have been made.
type silentFlood struct {
	dials, open, failed atomic.Int64
	firstErr            atomic.Value // error
}

func holdSilent(t *testing.T, addr, src string, n int, budget int64) *silentFlood {
	t.Helper()
	f := &silentFlood{}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 512)
			for f.dials.Add(1) <= budget && ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					f.failed.Add(1)
					f.firstErr.CompareAndSwap(nil, err)
					select { // refused (the node stopped) or out of ports for a moment
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				f.open.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				stop()
				c.Close()
				f.open.Add(-1)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f
}

// awaitDials waits until at least n dials have been made, within d.
func (f *silentFlood) awaitDials(n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for f.dials.Load() < int64(n) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
