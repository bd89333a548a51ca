package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
)

// A Job against a real server: the command sees the lock in its environment, its exit status
// comes back, and the lock is released after it (confirmed), also when the command could not
// be started.
func TestJobRunsUnderTheLockAndReleasesIt(t *testing.T) {
	ts := servertest.Start(t, cluster.DefaultConfig(), server.Config{})
	cl, err := client.New(client.Config{Servers: []string{ts.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx := context.Background()
	acquire := func() *client.Ticket {
		t.Helper()
		tk, err := cl.Acquire(ctx, "job", 0, client.AcquireOptions{Lease: 30 * time.Second}) // wait 0: held would fail
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return tk
	}
	sh, err := Resolve("sh")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "env")
	tk := acquire()
	res, err := Job{Ticket: tk, Path: sh, Args: []string{"sh", "-c", `echo "$LATCH_KEY $LATCH_TOKEN" > "$1"; exit 3`, "sh", out},
		Stdout: os.Stderr, Stderr: os.Stderr, Schedule: Schedule{Lease: 30 * time.Second, Grace: 5 * time.Second}}.Run()
	if err != nil || res.State == nil || res.State.ExitCode() != 3 || res.Release != nil {
		t.Fatalf("Run: %+v, %v; want exit 3 and a confirmed release", res, err)
	}
	if b, _ := os.ReadFile(out); string(b) != "job "+strconv.FormatUint(tk.Token, 10)+"\n" {
		t.Fatalf("the command saw %q, want the key and token %d", b, tk.Token)
	}

	tk = acquire() // the lock was released: an immediate acquire gets it
	_, err = Job{Ticket: tk, Path: filepath.Join(t.TempDir(), "none"), Args: []string{"none"}, Schedule: Schedule{Lease: 30 * time.Second, Grace: 5 * time.Second}}.Run()
	var se *StartError
	if !errors.As(err, &se) || se.Release != nil {
		t.Fatalf("Run of a missing command: %v, want a *StartError with a confirmed release", err)
	}
	acquire().Release(ctx)
}
