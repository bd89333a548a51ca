package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Issue 11: 130 silent connections per node to the peer port kept the survivors of a leader
// SIGTERM from electing anyone for more than 22 s. Here a flood process per node holds 500
// (each dialled again as soon as the node closes it) while the leader gets SIGTERM: a ready
// leader must come within 15 s (it comes in well under a second), and a lock must be granted
// through a follower (a new forward connection through the flooded peer port). The time is
// logged against a run without the flood. The flood comes from the members' own address (one
// host: only speed tells a member from a stranger) and from another loopback address (a
// stranger's own source, held to its own cap). Before the peer port's handshake table, no
// leader was ready within 15 s.
func TestClusterElectsUnderPeerFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine latch processes and six floods of 500 connections; skipped with -short")
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
			var floods []*floodProc
			if mode.src != "" {
				for _, a := range tc.raft {
					floods = append(floods, startFlood(t, a, mode.src, perNode, 500_000))
				}
				// Every flood connection dialled at least twice; and a few first-byte deadlines.
				for i, f := range floods {
					if !f.awaitDials(2*perNode, 10*time.Second) {
						t.Fatalf("flood of %s: %+v", tc.raft[i], *f.last.Load())
					}
				}
				time.Sleep(2 * time.Second)
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
				dials += fl.stop(t).Dials
			}
			elected := lastLogTime(t, tc.procs[nl], "leading").Sub(lastLogTime(t, tc.procs[l], "signal received"))
			t.Logf("SIGTERM to n%d; n%d leading %v later by the logs; seen leading over HTTP after %v, all ready after %v (flood dials %d); peak RSS: n%d %s, n%d %s",
				l+1, nl+1, elected.Round(time.Millisecond), leading.Round(time.Millisecond), took.Round(time.Millisecond), dials, nl+1, peakRSS(tc.procs[nl]), f+1, peakRSS(tc.procs[f]))
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

// peakRSS is the peak resident set size of p, for the test log, or "unknown".
func peakRSS(p *proc) string {
	b, err := readVmHWM(p.cmd.Process.Pid)
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%d kB", b>>10)
}

// floodEnv names the environment variable that makes the test binary a flood process: its
// value is a floodSpec in JSON.
const floodEnv = "LATCH_TEST_FLOOD"

// floodSpec is what a flood process does: hold N connections to Addr from the local address
// Src that never send a byte (they read and discard), each dialled again as soon as the other
// side closes it, until its stdin closes, Budget dials have been made, or a minute passed.
type floodSpec struct {
	Addr, Src string
	N         int
	Budget    int64
}

// floodReport is a flood process's progress line on stdout, every 50 ms and once at the end.
type floodReport struct {
	Dials, Failed int64
	FirstErr      string `json:",omitempty"`
	Done          bool   `json:",omitempty"`
}

// floodMain runs a flood process and returns its exit code.
func floodMain(spec string) int {
	var s floodSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	f := clustertest.StartFlood(ctx, clustertest.FloodSpec{Addr: s.Addr, Src: s.Src, N: s.N, Budget: s.Budget, Retry: 20 * time.Millisecond})
	enc := json.NewEncoder(os.Stdout)
	report := func(done bool) {
		enc.Encode(floodReport{Dials: min(f.Dials.Load(), s.Budget), Failed: f.Failed.Load(), FirstErr: f.FirstErr(), Done: done})
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			report(false)
		}
	}
	f.Wait()
	report(true)
	return 0
}

// floodProc is a flood process started by a test.
type floodProc struct {
	stdin io.Closer
	last  atomic.Pointer[floodReport]
	done  chan struct{}
}

// startFlood starts a flood process (floodSpec) and stops it when the test ends.
func startFlood(t *testing.T, addr, src string, n int, budget int64) *floodProc {
	t.Helper()
	spec, _ := json.Marshal(floodSpec{Addr: addr, Src: src, N: n, Budget: budget})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), floodEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &floodProc{stdin: stdin, done: make(chan struct{})}
	f.last.Store(&floodReport{})
	go func() {
		defer close(f.done)
		dec := json.NewDecoder(stdout)
		for {
			var r floodReport
			if dec.Decode(&r) != nil {
				break
			}
			f.last.Store(&r)
		}
		cmd.Wait()
	}()
	t.Cleanup(func() { f.stop(t) })
	return f
}

// stop ends the flood (its connections close) and returns its last report.
func (f *floodProc) stop(t *testing.T) floodReport {
	t.Helper()
	f.stdin.Close()
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		t.Errorf("flood process still running 30 s after its stdin closed")
	}
	return *f.last.Load()
}

// awaitDials waits until the flood has made at least n dials, within d.
func (f *floodProc) awaitDials(n int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for f.last.Load().Dials < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Issue 11: 60 silent connections against --max-conns 50 kept legitimate clients out for 5 s
// each, and the refusal said "no leader, or shutting down". Here a flood process holds 60
// silent connections (each dialled again as soon as the server closes it) and legitimate
// clients, each its own latch process, acquire and release at once; clients authenticated
// before the flood keep working. Raw connects count how often a fresh connection got in at
// the very first attempt: on one shared host a connection whose hello is not yet written
// can lose its place to the flood's churn (the official client then retries), so that count
// is reported, not asserted. A client refused for the connection limit says so.
func TestClientPortSilentFlood(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 40)
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServer(t, nil, "--secret-file", file, "--max-conns", "50")
	var held []*wiretest.Conn
	for range 10 {
		c := wiretest.Dial(t, p.listen)
		c.Hello(t, []byte(secret))
		held = append(held, c)
	}
	fl := startFlood(t, p.listen, "127.0.0.1", 60, 500_000)
	if !fl.awaitDials(120, 10*time.Second) {
		t.Fatalf("flood: %+v", *fl.last.Load())
	}
	time.Sleep(500 * time.Millisecond)

	const clients = 10
	var worst time.Duration
	for i := range clients {
		start := time.Now()
		key := fmt.Sprintf("flood/%d", i)
		code, out := run(t, nil, "acquire", "--servers", p.listen, "--secret-file", file, "--json", key)
		if code != 0 {
			t.Fatalf("client %d: latch acquire during the flood: exit %d, %q", i, code, out)
		}
		var got struct{ Token uint64 }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("client %d: %q: %v", i, out, err)
		}
		if code, out := run(t, nil, "release", "--servers", p.listen, "--secret-file", file, key, fmt.Sprint(got.Token)); code != 0 {
			t.Fatalf("client %d: latch release during the flood: exit %d, %q", i, code, out)
		}
		worst = max(worst, time.Since(start))
	}
	const raw = 50
	firstTry := 0
	for range raw {
		c, err := wiretest.DialErr(p.listen)
		if err != nil {
			t.Fatal(err)
		}
		nonce, _ := wire.NewNonce()
		c.Send(t, wiretest.Hello(wire.Version, 0, nonce))
		if r, err := c.TryNext(wiretest.ReadTimeout); err == nil && r.Op == wire.OpHello {
			firstTry++
		}
		c.Close()
	}
	for i, c := range held {
		c.Alive(t, uint64(10+i))
	}
	_, metrics := httpGet(t, "http://"+p.http+"/metrics")
	refused := metricLine(metrics, "latch_connections_refused_total")
	t.Logf("%d latch acquire+release pairs succeeded during the flood (slowest pair %v, two processes each); %d of %d raw connects answered at the first attempt; flood dials %d; %s; server peak RSS %s",
		clients, worst.Round(time.Millisecond), firstTry, raw, fl.stop(t).Dials, refused, peakRSS(p))
	if refused == "" || refused == "latch_connections_refused_total 0" {
		t.Fatalf("the flood never reached the limit (%q), so the test showed nothing", refused)
	}

	// A full server: the client's error names the connection limit.
	full := startServer(t, nil, "--secret-file", file, "--max-conns", "1")
	c := wiretest.Dial(t, full.listen)
	c.Hello(t, []byte(secret))
	code, out := run(t, nil, "acquire", "--servers", full.listen, "--secret-file", file, "--wait", "1s", "flood/full")
	if code == 0 || !strings.Contains(out, "connection limit (--max-conns)") || strings.Contains(out, "no leader") {
		t.Fatalf("acquire on a full server: exit %d, %q; want an error naming the connection limit", code, out)
	}
	t.Logf("latch acquire on a full server: exit %d: %s", code, strings.TrimSpace(out))
	c.Alive(t, 1)
}

// Issue 11: 3,000 idle keep-alive connections to --http stayed open for good, and on a node
// with a 1,200 descriptor limit they made the client port fail accept (too many open
// files). With that limit, the HTTP connection cap (256) keeps the node's descriptors in
// hand: /healthz answers, a client connects and acquires, and nothing fails to accept.
func TestHTTPIdleFloodUnderLowDescriptorLimit(t *testing.T) {
	t.Parallel()
	const conns = 3000
	cmd := exec.Command("sh", "-c", `ulimit -n 1200 && exec "$0" "$@"`, latchBin, "server", "--log-format", "json",
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	p := spawn(t, cmd, "server")
	p.awaitServing(t)
	limit := procLimit(p, "Max open files")

	var answered, closedEarly, asked atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	sem := make(chan struct{}, 100)
	for range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", p.http, 5*time.Second)
			<-sem
			if err != nil {
				asked.Add(1)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			br := bufio.NewReader(c)
			var resp *http.Response
			if _, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: latch\r\n\r\n"); err == nil {
				resp, err = http.ReadResponse(br, nil)
			}
			asked.Add(1)
			if err != nil {
				return // closed to make room before its answer
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answered.Add(1)
			done := make(chan struct{})
			go func() { br.ReadByte(); close(done) }() // idle until the server closes it
			select {
			case <-done:
				closedEarly.Add(1)
			case <-stop:
			}
		}()
	}
	for wait := time.Now().Add(20 * time.Second); (len(sem) > 0 || answered.Load() < conns/2) && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond) // until the flood is well under way
	}
	if code, body := httpGet(t, "http://"+p.http+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz during the flood: %d %q", code, body)
	}
	c := p.dial(t)
	if r := c.Do(t, wiretest.Acquire(1, 0, 30, "http/flood")); r.Op != wire.OpAcquire {
		t.Fatalf("acquire during the HTTP flood: %s", wiretest.Describe(r))
	}
	// Every connection has had its answer (or was closed first); all but the newest 256 of
	// those answered are closed, long before the 30 s idle timeout.
	deadline := time.Now().Add(20 * time.Second)
	for (asked.Load() < conns || closedEarly.Load() < answered.Load()-256) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d keep-alive connections: %d answered, %d closed by the server to make room (cap 256); descriptor limit %s; server peak RSS %s",
		conns, answered.Load(), closedEarly.Load(), limit, peakRSS(p))
	close(stop)
	wg.Wait()
	if closedEarly.Load() < answered.Load()-256 {
		t.Fatalf("only %d of %d answered connections closed by the server: the cap held more than 256", closedEarly.Load(), answered.Load())
	}
	if strings.Contains(p.stderr.String(), "too many open files") {
		t.Fatalf("the node ran out of descriptors:\n%s", p.stderr.String())
	}
	c.Alive(t, 2)
}

// procLimit returns the soft and hard value of one limit in /proc/PID/limits, or "unknown".
func procLimit(p *proc, name string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", p.cmd.Process.Pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(v)
			if len(f) >= 2 {
				return f[0] + " (hard " + f[1] + ")"
			}
		}
	}
	return "unknown"
}
