package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/latchd/latch/client"
)

// Take a lock for a nightly job, do the work under the ticket's context, pass the fencing
// token to the database, and release it.
func Example() {
	c, err := client.New(client.Config{
		Servers:    []string{"10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400"},
		SecretFile: "/etc/latch/secret",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	// Wait up to 10 s for the lock; hold it 60 s; the work needs 40 s at most.
	t, err := c.Acquire(ctx, "jobs/nightly-report", 40*time.Second, client.AcquireOptions{
		Wait:  10 * time.Second,
		Lease: 60 * time.Second,
	})
	switch {
	case errors.Is(err, client.ErrUnavailable):
		log.Fatal(err) // no server took it during the whole wait: latch is down, say so
	case errors.Is(err, client.ErrTimeout), errors.Is(err, client.ErrBusy):
		fmt.Println("someone else runs it; skipping")
		return
	case err != nil:
		// ErrIndeterminate included: we do not hold the lock as far as we know.
		log.Fatal(err)
	}
	defer t.Release(context.Background())

	// The ticket's context ends at its conservative lease deadline.
	work, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := runReport(work, t.Token); err != nil {
		log.Print(err)
	}
}

// runReport stands for the critical work: every write carries the fencing token, and the
// storage rejects tokens older than the newest it has seen.
func runReport(ctx context.Context, token uint64) error {
	_ = token
	return ctx.Err()
}

// Keep a lock for work of unknown length on servers that offer protocol revision 2: the
// keep-alive extends the lease every third of it, and the ticket's context ends, with its
// cause, when the lock is lost or no extension was confirmed in time.
func ExampleTicket_KeepAlive() {
	c, err := client.New(client.Config{Servers: []string{"10.0.0.1:7400"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	t, err := c.Acquire(ctx, "queues/orders/consumer", 5*time.Second, client.AcquireOptions{Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Release(context.Background()) // stops the keep-alive, then releases
	if err := t.KeepAlive(ctx, 0); errors.Is(err, client.ErrUnsupported) {
		log.Print("the servers do not offer extend: the work must end within the lease")
	}
	work := t.Context()
	<-work.Done() // stands for work that watches the context and stops when it ends
	switch cause := context.Cause(work); {
	case errors.Is(cause, client.ErrTicketLost):
		log.Print("lost the lock: stop at once, its token no longer holds it")
	case errors.Is(cause, client.ErrTicketUnconfirmed):
		log.Printf("could not keep the lock (%v): stop before its deadline %v", cause, t.CurrentDeadline())
	}
}
