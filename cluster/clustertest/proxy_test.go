package clustertest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves lines back on 127.0.0.1 until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, within time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	return r.ReadString('\n')
}

// A proxy delays each direction by its Delay (a round trip takes at least both), holds
// back what a stalled direction would carry until the stall ends, keeps the order of bytes,
// and Reset ends open connections while new ones are carried.
func TestProxyShapes(t *testing.T) {
	p := StartProxy(t, echo(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "plain", Bound); err != nil || got != "plain\n" {
		t.Fatalf("plain: %q %v", got, err)
	}

	p.Set(Down, Shape{Delay: 150 * time.Millisecond, Jitter: 50 * time.Millisecond})
	p.Set(Up, Shape{Delay: 150 * time.Millisecond})
	start := time.Now()
	if got, err := roundTrip(t, c, r, "slow", Bound); err != nil || got != "slow\n" {
		t.Fatalf("slow: %q %v", got, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("a round trip through 150 ms each way took %v", took)
	}
	for i := range 20 { // jitter never reorders
		if _, err := c.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 20)
	_ = c.SetReadDeadline(time.Now().Add(Bound))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "abcdefghijklmnopqrst" {
		t.Fatalf("bytes through jitter: %q %v", got, err)
	}

	p.Set(Up, Shape{})
	p.Set(Down, Shape{Stall: true})
	if got, err := roundTrip(t, c, r, "held", 500*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("through a stall: %q %v, want nothing back", got, err)
	}
	p.Set(Down, Shape{})
	_ = c.SetReadDeadline(time.Now().Add(Bound))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the stall: %q %v", got, err)
	}

	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset ended %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(Bound))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a reset connection still reads")
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(t, c2, bufio.NewReader(c2), "again", Bound); err != nil || got != "again\n" {
		t.Fatalf("a new connection after Reset: %q %v", got, err)
	}
}
