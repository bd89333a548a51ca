package gctune

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, Default},
		{1 << 20, Default},
		{MinGarbage, Default},
		{100 * MinGarbage / Default, Default}, // MinGarbage is exactly Default percent
		{2 * MinGarbage, 50},
		{150 << 20, 42},
		{MinGarbage * 100 / Share, Share},
		{1 << 40, Share},
	} {
		if got := Percent(c.live); got != c.want {
			t.Errorf("Percent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}

func gogc(t *testing.T) int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// With 400 MiB live, Run lowers GOGC to Share; once the data is gone it goes back to the
// default. The test keeps the process's GOGC as it found it.
func TestRunFollowsTheLiveHeap(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in this test's environment, so Run leaves it alone by design; unset it to run this test")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(Default))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, hclog.NewNullLogger()); close(done) }()
	defer func() { cancel(); <-done }()

	hold := make([][]byte, 400)
	for i := range hold {
		hold[i] = make([]byte, 1<<20)
	}
	waitFor(t, func() bool { runtime.GC(); return gogc(t) == Share })
	runtime.KeepAlive(hold)
	hold = nil
	waitFor(t, func() bool { runtime.GC(); return gogc(t) == Default })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10*Every + 30*time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is %d after %v", gogc(t), 10*Every+30*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
