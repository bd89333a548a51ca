package clustertest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// DeadAddr returns a loopback address nothing listens on (a port that was just free): a
// dial is refused.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// NonLatchAddr returns the loopback address of an HTTP server that lives until the test
// ends: a port that accepts connections but does not speak latch.
func NonLatchAddr(t testing.TB) string {
	t.Helper()
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	return strings.TrimPrefix(web.URL, "http://")
}
