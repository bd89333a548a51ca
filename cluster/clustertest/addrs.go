package clustertest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
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

// Ports for processes that must keep their address across restarts come from below the
// kernel's ephemeral range (32768-60999 by default), so that no outgoing connection and no
// ":0" listener of another test can take one between the probe and the bind: with ports the
// kernel had handed out, a busy run lost one now and then ("address already in use").
const (
	portLow  = 20000
	portHigh = 32000
)

var nextPort atomic.Int32

func init() { nextPort.Store(int32(portLow + os.Getpid()%(portHigh-portLow))) }

// FreePorts reserves n distinct loopback ports (each probed by a listen and closed again),
// never the same one twice in this process. A port some other program holds is skipped.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 10*(portHigh-portLow) {
			t.Fatalf("no free loopback port in %d-%d", portLow, portHigh)
		}
		p := nextPort.Add(1)
		if p >= portHigh {
			nextPort.CompareAndSwap(p, portLow)
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		out = append(out, ln.Addr().String())
		ln.Close()
	}
	return out
}
