package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/server"
	"github.com/latchd/latch/cluster/servertest"
)

// A run against a real server: four workers contend for one key; every pair is counted,
// tokens only rise, the window is opened and closed once, progress is reported, and the
// clients end the run clean.
func TestRunAgainstARealServer(t *testing.T) {
	ts := servertest.Start(t, cluster.DefaultConfig(), server.Config{})
	var cls []*client.Client
	for range 4 {
		cl, err := client.New(client.Config{Servers: []string{ts.Addr}, Conns: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		cls = append(cls, cl)
	}
	opened, closed, ticks := 0, 0, 0
	res := Run(context.Background(), Config{
		Clients: cls, Keys: 1, Prefix: "bench/", Duration: 1500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Options:  client.AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second},
		Progress: func(time.Duration, int64) { ticks++ },
		Measure:  func() func() { opened++; return func() { closed++ } },
	})
	if res.Pairs == 0 || res.Inversions != 0 || len(res.Errors) != 0 {
		t.Fatalf("result %+v: want pairs, no inversions, no errors", res)
	}
	if res.AcquireMs["p50"] <= 0 || res.AcquireMs["max"] < res.AcquireMs["p99"] || res.ReleaseMs["p50"] <= 0 {
		t.Fatalf("latencies %v %v", res.AcquireMs, res.ReleaseMs)
	}
	if opened != 1 || closed != 1 || ticks < 1 {
		t.Fatalf("window opened %d, closed %d, progress %d times", opened, closed, ticks)
	}
	if res.Clients != 4 || res.Keys != 1 || res.DurationS < 1.4 || res.Client["indeterminate"] != 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestErrName(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", client.ErrIndeterminate): "indeterminate",
		client.ErrBusy:           "busy",
		fmt.Errorf("unrelated"):  "other",
		client.ErrTokenExhausted: "token_exhausted",
	} {
		if got := ErrName(err); got != want {
			t.Errorf("ErrName(%v) = %q, want %q", err, got, want)
		}
	}
}
