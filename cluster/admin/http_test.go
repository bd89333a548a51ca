package admin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "latch_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady atomic.Pointer[error]
	ready := func() error {
		if e := notReady.Load(); e != nil {
			return *e
		}
		return nil
	}
	srv := httptest.NewServer(Handler(reg, ready, Options{}))
	defer srv.Close()

	if code, body := get(t, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	e := errors.New("shutting down")
	notReady.Store(&e)
	if code, body := get(t, srv.URL+"/readyz"); code != 503 || !strings.Contains(body, "shutting down") {
		t.Fatalf("/readyz while not ready: %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, "latch_test_total 3\n") {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	if code, _ := get(t, srv.URL+"/debug/pprof/"); code != 404 {
		t.Fatalf("/debug/pprof/ without Pprof: %d, want 404", code)
	}
	for _, p := range []string{"/v1/snapshot", "/v1/peers", "/v1/peers/n1"} {
		if code, body := get(t, srv.URL+p); code != 404 || !strings.Contains(body, "single-mode server") {
			t.Fatalf("%s without a cluster: %d %q, want 404 saying why", p, code, body)
		}
	}
}

func TestPprofOptIn(t *testing.T) {
	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), func() error { return nil }, Options{Pprof: true}))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d", code)
	}
}
