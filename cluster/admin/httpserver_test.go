package admin

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/clustertest"
)

// serveHTTP serves h with cfg on 127.0.0.1 until the test ends and returns its address and
// connection cap.
func serveHTTP(t *testing.T, h http.Handler, cfg HTTPConfig) (string, *connCap) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = clustertest.Logger(t, "http", hclog.Info)
	hs, capped := NewHTTPServer(h, ln, cfg)
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(capped) }()
	t.Cleanup(func() { _ = hs.Close(); <-done })
	return ln.Addr().String(), capped.(*connCap)
}

// healthz GETs /healthz on a fresh connection and reports whether it answered 200 ok.
func healthz(addr string) error {
	c := &http.Client{Timeout: clustertest.Bound, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		return fmt.Errorf("/healthz: %d %q", resp.StatusCode, b)
	}
	return nil
}

// Issue 11: 3,000 idle keep-alive connections stayed open for good. Each of these sends one
// request and then idles: the cap keeps at most MaxConns open (a newcomer takes the place of
// the one idle longest), the rest close at the idle timeout, and /healthz answers meanwhile.
func TestHTTPIdleKeepAliveFlood(t *testing.T) {
	const conns, maxConns = 3000, 256
	cfg := DefaultHTTPConfig()
	cfg.IdleTimeout, cfg.MaxConns = 2*time.Second, maxConns
	addr, capped := serveHTTP(t, Handler(prometheus.NewRegistry(), func() error { return nil }, Options{}), cfg)

	var answered, closed atomic.Int64
	var lastAnswer atomic.Int64 // unix nanoseconds
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200) // dials in flight
	for range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, clustertest.Bound)
			<-sem
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(cfg.IdleTimeout + 4*clustertest.Bound))
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: latch\r\n\r\n"); err != nil {
				closed.Add(1)
				return
			}
			br := bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
				lastAnswer.Store(time.Now().UnixNano())
			}
			if _, err := br.ReadByte(); isTimeout(err) { // idle until the server closes
				t.Errorf("connection still open %v after its request", cfg.IdleTimeout+4*clustertest.Bound)
				return
			}
			closed.Add(1)
		}()
	}
	// While the flood's connections idle, a probe on a new connection is answered.
	for i := range 10 {
		if err := healthz(addr); err != nil {
			t.Fatalf("probe %d during the flood: %v", i, err)
		}
	}
	wg.Wait()
	sinceLast := time.Since(time.Unix(0, lastAnswer.Load()))
	t.Logf("%d connections: %d answered, all %d closed %v after the last answer (idle timeout %v); peak open %d of %d, %d evicted, %d refused; %s",
		conns, answered.Load(), closed.Load(), sinceLast.Round(time.Millisecond), cfg.IdleTimeout,
		capped.peak.Load(), maxConns, capped.evicted.Load(), capped.refused.Load(), clustertest.MemReport())
	if closed.Load() != conns {
		t.Fatalf("%d of %d connections closed", closed.Load(), conns)
	}
	if p := capped.peak.Load(); p > maxConns {
		t.Fatalf("peak %d open connections, cap %d", p, maxConns)
	}
	if answered.Load() < maxConns {
		t.Fatalf("only %d connections answered", answered.Load())
	}
	if err := healthz(addr); err != nil {
		t.Fatalf("after the flood: %v", err)
	}
}

// readAll is a handler that reads its whole body and answers its length, or 408 if the body
// did not come in time.
func readAll(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestTimeout)
		return
	}
	fmt.Fprintf(w, "%d\n", n)
}

// A body that trickles in is cut off at ReadTimeout, on every endpoint, the restore's
// included; a restore upload that keeps a real rate may take longer than ReadTimeout, any
// other body may not. Slow headers end at ReadHeaderTimeout, huge ones are refused.
func TestHTTPSlowBodies(t *testing.T) {
	cfg := DefaultHTTPConfig()
	cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.MinTransferRate = time.Second, time.Second, 4<<20
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/restore", readAll)
	mux.HandleFunc("POST /v1/peers", readAll)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	addr, _ := serveHTTP(t, mux, cfg)

	for _, path := range []string{"/v1/peers", "/v1/restore"} {
		t.Run("slow-loris body "+path, func(t *testing.T) {
			t.Parallel()
			c := rawHTTP(t, addr)
			start := time.Now()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: latch\r\nContent-Length: 100000\r\n\r\n", path)
			cut := trickle(c, 100*time.Millisecond, 30*time.Second)
			t.Logf("%s: the server stopped the body after %v (ReadTimeout %v)", path, cut.Round(time.Millisecond), cfg.ReadTimeout)
			if cut > cfg.ReadTimeout+clustertest.Bound {
				t.Fatalf("body still read after %v", time.Since(start))
			}
		})
	}
	t.Run("slow headers", func(t *testing.T) {
		t.Parallel()
		c := rawHTTP(t, addr)
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\n")
		cut := trickle(c, 100*time.Millisecond, 30*time.Second)
		if cut > cfg.ReadHeaderTimeout+clustertest.Bound {
			t.Fatalf("headers still read after %v", cut)
		}
	})
	t.Run("huge header", func(t *testing.T) {
		t.Parallel()
		c := rawHTTP(t, addr)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: latch\r\nX-Big: %s\r\n\r\n", strings.Repeat("x", 2*cfg.MaxHeaderBytes))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("huge header: %v %v, want 431", resp, err)
		}
	})
	const size = 24 << 20 // at 12 MiB/s: 2 s, twice ReadTimeout; the floor is 4 MiB/s
	for _, tc := range []struct {
		path string
		ok   bool
	}{{"/v1/restore", true}, {"/v1/peers", false}} {
		t.Run("paced upload "+tc.path, func(t *testing.T) {
			t.Parallel()
			code, body, took := pacedUpload(t, addr, tc.path, size, 12<<20)
			t.Logf("%s: %d MiB in %v: %d %q", tc.path, size>>20, took.Round(time.Millisecond), code, strings.TrimSpace(body))
			if got := code == 200 && body == fmt.Sprintf("%d\n", size); got != tc.ok {
				t.Fatalf("%s: %d %q after %v; want success %v", tc.path, code, body, took, tc.ok)
			}
		})
	}
}

// rawHTTP dials addr and closes the connection when the test ends.
func rawHTTP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, clustertest.Bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// trickle writes one byte every gap until a write fails or the server answers or closes,
// for at most within, and returns how long that took.
func trickle(c net.Conn, gap, within time.Duration) time.Duration {
	start := time.Now()
	ended := make(chan struct{})
	go func() { // the server answering (a 408) or closing ends the trickle too
		_, _ = c.Read(make([]byte, 1))
		close(ended)
	}()
	for time.Since(start) < within {
		if _, err := c.Write([]byte{'x'}); err != nil {
			break
		}
		select {
		case <-ended:
			return time.Since(start)
		case <-time.After(gap):
		}
	}
	return time.Since(start)
}

// pacedUpload POSTs size bytes to path at rate bytes a second and returns the answer.
func pacedUpload(t *testing.T, addr, path string, size, rate int) (int, string, time.Duration) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte{'b'}, 64<<10)
		start := time.Now()
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
			time.Sleep(time.Until(start.Add(time.Duration(float64(sent+len(chunk)) / float64(rate) * float64(time.Second)))))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, pr)
	req.ContentLength = int64(size)
	c := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	resp, err := c.Do(req)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return 0, err.Error(), time.Since(start)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(start)
}

// A backup read at a real rate may take longer than WriteTimeout; any other response may
// not; a backup nobody reads is cut off.
func TestHTTPBackupDownloads(t *testing.T) {
	cfg := DefaultHTTPConfig()
	cfg.WriteTimeout, cfg.MinTransferRate = time.Second, 4<<20
	const size = 24 << 20
	big := bytes.Repeat([]byte{'s'}, size)
	write := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		_, _ = w.Write(big)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/snapshot", write)
	mux.HandleFunc("GET /v1/status", write)
	addr, _ := serveHTTP(t, mux, cfg)
	for _, tc := range []struct {
		path string
		ok   bool
	}{{"/v1/snapshot", true}, {"/v1/status", false}} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			n, took, err := pacedDownload(addr, tc.path, 12<<20)
			t.Logf("%s: %d of %d bytes in %v: %v", tc.path, n, size, took.Round(time.Millisecond), err)
			if got := err == nil && n == size; got != tc.ok {
				t.Fatalf("%s: %d bytes, %v; want success %v", tc.path, n, err, tc.ok)
			}
		})
	}
}

// pacedDownload GETs path and reads the body at rate bytes a second.
func pacedDownload(addr, path string, rate int) (int, time.Duration, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, time.Since(start), err
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	n := 0
	for {
		k, err := resp.Body.Read(buf)
		n += k
		if err == io.EOF {
			return n, time.Since(start), nil
		}
		if err != nil {
			return n, time.Since(start), err
		}
		time.Sleep(time.Until(start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))))
	}
}

// When every connection has a request in progress, a newcomer is closed at once; once one
// finishes, the next is served.
func TestHTTPCapRefusesWhenAllBusy(t *testing.T) {
	cfg := DefaultHTTPConfig()
	cfg.MaxConns = 2
	release := make(chan struct{})
	var inFlight sync.WaitGroup
	mux := http.NewServeMux()
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		inFlight.Done()
		<-release
		_, _ = io.WriteString(w, "done\n")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	addr, capped := serveHTTP(t, mux, cfg)
	inFlight.Add(2)
	var busy []net.Conn
	for range 2 {
		c := rawHTTP(t, addr)
		_, _ = io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: latch\r\n\r\n")
		busy = append(busy, c)
	}
	inFlight.Wait()
	c := rawHTTP(t, addr)
	_ = c.SetReadDeadline(time.Now().Add(clustertest.Bound))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("a connection over the cap: read %d, %v; want it closed at once", n, err)
	}
	if capped.refused.Load() != 1 {
		t.Fatalf("refused %d, want 1", capped.refused.Load())
	}
	close(release)
	for _, b := range busy {
		if resp, err := http.ReadResponse(bufio.NewReader(b), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("busy request: %v %v", resp, err)
		}
	}
	// Both are idle keep-alives now: a newcomer takes the place of one.
	if err := healthz(addr); err != nil {
		t.Fatal(err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A restore refused from its headers is answered at once even though its announced body is
// neither sent nor read: the pacing must not make the server drain the body first.
func TestHTTPRestoreRefusedBeforeItsBody(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/restore", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unsigned", http.StatusUnauthorized)
	})
	addr, _ := serveHTTP(t, mux, DefaultHTTPConfig())
	c := rawHTTP(t, addr)
	_, _ = io.WriteString(c, "POST /v1/restore?token_floor=5 HTTP/1.1\r\nHost: latch\r\nContent-Length: 900000000\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(clustertest.Bound))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("refused restore: %v %v, want 401 at once", resp, err)
	}
}
