package netpeek

import (
	"net"
	"testing"
	"time"
)

func TestHasInput(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if HasInput(c) {
		t.Fatal("input seen before the other side wrote anything")
	}
	if _, err := dialed.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !HasInput(c) {
		if time.Now().After(deadline) {
			t.Fatal("a written byte never showed as input")
		}
		time.Sleep(time.Millisecond)
	}
	b := make([]byte, 1) // the peek left it there
	if n, err := c.Read(b); n != 1 || b[0] != 'x' || err != nil {
		t.Fatalf("read %d %q %v after the peek", n, b[:n], err)
	}
}
