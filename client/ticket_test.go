package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTicketContextTakenBeforeRelease(t *testing.T) {
	rs := startReal(t, nil)
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	tk, err := cl.Acquire(ctx, "k", 0, AcquireOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	work := tk.Context()
	if dl, ok := work.Deadline(); !ok || !dl.Equal(tk.Deadline) {
		t.Fatalf("Deadline() = %v %v, want %v", dl, ok, tk.Deadline)
	}
	if work.Err() != nil {
		t.Fatalf("context done before Release: %v", work.Err())
	}
	if tk.Context() != work {
		t.Fatal("Context returned a different context the second time")
	}
	if err := tk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-work.Done():
	case <-time.After(bound):
		t.Fatal("context not done after Release")
	}
	if !errors.Is(work.Err(), context.Canceled) {
		t.Fatalf("Err() = %v, want Canceled", work.Err())
	}
}
