package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// Issue 13 item 5: with a low open-files limit and the default --max-conns, clients sat in
// the listen backlog, /readyz and /metrics stopped answering, and nothing was counted.

// spawnLimited starts `latch server` under `ulimit -n limit` (soft and hard).
func spawnLimited(t *testing.T, limit int, args ...string) *proc {
	t.Helper()
	full := append([]string{"server", "--log-format", "json", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, args...)
	cmd := exec.Command("sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, limit), latchBin}, full...)...)
	return spawn(t, cmd, "server")
}

// servingField returns a number from the server's "latch serving" log line, as
// awaitServing took it.
func servingField(t *testing.T, p *proc, name string) int {
	t.Helper()
	if v, ok := p.served[name].(float64); ok {
		return int(v)
	}
	t.Fatalf("no %s in the 'latch serving' line:\n%s", name, p.stderr.String())
	return 0
}

// hello dials addr, sends a hello and returns the connection and the first answer: H when
// served, E unavailable when refused.
func hello(t *testing.T, addr string) (*wiretest.Conn, wire.Response) {
	t.Helper()
	c := wiretest.Dial(t, addr)
	var n [wire.NonceSize]byte
	c.Send(t, wiretest.Hello(wire.Version, 0, n))
	r, err := c.TryNext(10 * time.Second)
	if err != nil {
		t.Fatalf("no answer to a hello within 10 s: %v", err)
	}
	return c, r
}

// connectMany connects n clients to addr one after the other and counts those served (H:
// kept open until the test ends) and those refused with E unavailable (closed at once); any
// other answer fails the test.
func connectMany(t *testing.T, addr string, n int) (served, refused int) {
	t.Helper()
	for i := range n {
		c, r := hello(t, addr)
		switch {
		case r.Op == wire.OpHello:
			served++
			t.Cleanup(func() { c.Close() })
		case r.Op == wire.OpError && r.Reason == wire.ReasonUnavailable && r.Owner == 0:
			refused++
			c.Close()
		default:
			t.Fatalf("client %d: %s, want H or E unavailable", i, wiretest.Describe(r))
		}
	}
	return served, refused
}

func TestDefaultMaxConnsFitsTheOpenFilesLimit(t *testing.T) {
	t.Parallel()
	p := spawnLimited(t, 256)
	p.awaitServing(t)
	maxConns := servingField(t, p, "max_conns")
	if maxConns >= 256 || maxConns < 16 || !strings.Contains(p.stderr.String(), "lowering --max-conns to fit the open-files limit") {
		t.Fatalf("max_conns %d under ulimit -n 256, or no warning that it was lowered", maxConns)
	}

	// More clients than fit: every one gets an answer, served or E unavailable.
	const clients = 300
	served, refused := connectMany(t, p.listen, clients)
	if served != maxConns || refused != clients-maxConns {
		t.Fatalf("%d served, %d refused of %d; want %d served (max_conns)", served, refused, clients, maxConns)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := httpGet(t, "http://"+p.http+path); code != 200 {
			t.Errorf("%s with every client slot taken: %d", path, code)
		}
	}
	_, body := httpGet(t, "http://"+p.http+"/metrics")
	if got := metricLine(body, "latch_connections_refused_total"); got != fmt.Sprint("latch_connections_refused_total ", refused) {
		t.Errorf("%q after %d refusals", got, refused)
	}
	if n := strings.Count(p.stderr.String(), "connection limit reached"); n > 10 {
		t.Errorf("%d log lines for %d refusals: not rate-limited", n, refused)
	}
}

func TestExplicitMaxConnsOverTheOpenFilesLimitRefusesToStart(t *testing.T) {
	t.Parallel()
	p := spawnLimited(t, 256, "--max-conns", "1000")
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20 s after a --max-conns over the open-files limit")
	}
	out := p.stderr.String()
	if p.err == nil || !strings.Contains(out, "--max-conns 1000 does not fit the open-files limit 256") || !strings.Contains(out, "ulimit -n") {
		t.Fatalf("exit %v; want a failure naming --max-conns and the limit:\n%s", p.err, out)
	}
}

// setOpenFiles sets the soft open-files limit of process pid (prlimit(2)); the hard limit
// stays.
func setOpenFiles(t *testing.T, pid int, soft uint64) {
	t.Helper()
	var old syscall.Rlimit
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_NOFILE, 0, uintptr(unsafe.Pointer(&old)), 0, 0); e != 0 {
		t.Fatalf("prlimit: %v", e)
	}
	lim := syscall.Rlimit{Cur: soft, Max: old.Max}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
		t.Fatalf("prlimit: %v", e)
	}
}

// When the descriptors run out anyway (here: the test lowers the running server's limit
// to just above what it has open), each new client gets E unavailable at once, on the
// spare descriptor, and is counted; the HTTP port answers on its open connection.
func TestOutOfDescriptorsRefusesWithUnavailable(t *testing.T) {
	t.Parallel()
	p := spawnLimited(t, 512)
	p.awaitServing(t)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://" + p.http + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}
	get("/healthz") // the keep-alive connection the rest of the test uses

	pid := p.cmd.Process.Pid
	open, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	const room = 5
	setOpenFiles(t, pid, uint64(len(open)+room))
	served, refused := connectMany(t, p.listen, 40)
	// Descriptors the server had closed when the test counted them leave gaps it can fill.
	if served > room+2 || refused < 40-room-2 {
		t.Fatalf("%d served, %d refused with room for about %d descriptors", served, refused, room)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := get(path); code != 200 {
			t.Errorf("%s while out of descriptors: %d", path, code)
		}
	}
	_, body := get("/metrics")
	if v := metricValue(body, "latch_connections_refused_total"); v == "" {
		t.Error("/metrics lacks latch_connections_refused_total")
	} else if n, _ := strconv.Atoi(v); n < refused {
		t.Errorf("latch_connections_refused_total %d after %d refusals", n, refused)
	}
	log := p.stderr.String()
	if !strings.Contains(log, "out of file descriptors; refusing connection") {
		t.Error("no log line says the descriptors ran out")
	}
	if n := strings.Count(log, "out of file descriptors"); n > 10 {
		t.Errorf("%d log lines for %d refusals: not rate-limited", n, refused)
	}

	// With its limit back, the server serves new clients and new HTTP connections again.
	setOpenFiles(t, pid, 512)
	if c, r := hello(t, p.listen); r.Op != wire.OpHello {
		t.Fatalf("after the limit came back: %s", wiretest.Describe(r))
	} else {
		c.Close()
	}
	if code, _ := httpGet(t, "http://"+p.http+"/readyz"); code != 200 {
		t.Fatalf("/readyz on a new connection after the limit came back: %d", code)
	}
}
