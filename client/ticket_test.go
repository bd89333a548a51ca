package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// heldTicket starts a real server and a client, and acquires key with lease; ctx ends after
// bound (and at cleanup).
func heldTicket(t *testing.T, key string, lease time.Duration) (*Client, context.Context, *Ticket) {
	t.Helper()
	rs := startReal(t, nil)
	cl := newTestClient(t, Config{Servers: []string{rs.addr}})
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
	t.Cleanup(cancel)
	tk, err := cl.Acquire(ctx, key, 0, AcquireOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return cl, ctx, tk
}

func TestTicketContextTakenBeforeRelease(t *testing.T) {
	_, ctx, tk := heldTicket(t, "k", time.Minute)
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
	doneWithin(t, work, clustertest.Bound, "context not done after Release")
	if !errors.Is(work.Err(), context.Canceled) {
		t.Fatalf("Err() = %v, want Canceled", work.Err())
	}
}

// A second Release of a ticket sends nothing: it returns ErrAlreadyReleased even with the
// client closed (a call would be ErrClosed).
func TestTicketReleaseIdempotent(t *testing.T) {
	cl, ctx, tk := heldTicket(t, "twice", time.Minute)
	if err := tk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := tk.Release(ctx); !errors.Is(err, ErrAlreadyReleased) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrAlreadyReleased", err)
	}
}

// A release after the ticket's deadline that finds the lock not held says that the lease
// had ended (ErrLeaseEnded, with ErrNotHeld), not that work may have overlapped.
func TestTicketReleaseAfterDeadlineSaysLeaseEnded(t *testing.T) {
	_, ctx, tk := heldTicket(t, "late", time.Second)
	time.Sleep(time.Until(tk.Deadline) + 1500*time.Millisecond) // past the server's lease too
	err := tk.Release(ctx)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLeaseEnded) {
		t.Fatalf("Release after the deadline: %v, want ErrNotHeld and ErrLeaseEnded", err)
	}
	if !strings.Contains(err.Error(), "the lease had ended") {
		t.Fatalf("message %q does not say the lease had ended", err)
	}
	if err := tk.Release(ctx); !errors.Is(err, ErrAlreadyReleased) {
		t.Fatalf("second Release: %v, want ErrAlreadyReleased", err)
	}
}
