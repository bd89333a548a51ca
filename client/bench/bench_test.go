package bench

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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
		fmt.Errorf("%w and %w", client.ErrTicketLost, client.ErrNotHeld): "lost",
		fmt.Errorf("x: %w", client.ErrUnsupported):                       "unsupported",
		fmt.Errorf("%w: its deadline passed", client.ErrTicketEnded):     "ended",
	} {
		if got := ErrName(err); got != want {
			t.Errorf("ErrName(%v) = %q, want %q", err, got, want)
		}
	}
}

// holdersClient is a client of ts for holders, with conns connections.
func holdersClient(t *testing.T, addr string, conns int, latch1 bool) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Servers: []string{addr}, Conns: conns, Latch1Only: latch1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Holders beside the pairs: every holder takes its own key, extends it through the window on
// the shared client's two connections with none failing, and gives it back at the end (the
// keys are free again); the pairs run as before.
func TestHoldersExtendAlongsideThePairs(t *testing.T) {
	ts := servertest.Start(t, cluster.DefaultConfig(), server.Config{})
	pairs := holdersClient(t, ts.Addr, 1, false)
	hc := holdersClient(t, ts.Addr, 2, false)
	res := Run(context.Background(), Config{
		Clients: []*client.Client{pairs}, Keys: 1, Prefix: "bench/", Duration: 1500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Options: client.AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second},
		Holders: Holders{Count: 300, Client: hc, Every: 400 * time.Millisecond, Lease: 5 * time.Second, Wait: 5 * time.Second},
	})
	if res.Pairs == 0 || res.Inversions != 0 || len(res.Errors) != 0 {
		t.Fatalf("pairs in %+v: want pairs, no inversions, no errors", res)
	}
	if res.Holders != 300 || res.HoldersHeld != 300 || res.Extends == 0 || res.ExtendsFailed != 0 || len(res.HoldErrors) != 0 {
		t.Fatalf("holders in %+v: want 300 held, extends, none failed", res)
	}
	if res.ExtendsPerS <= 0 || res.ExtendMs["p50"] <= 0 || res.ExtendMs["max"] < res.ExtendMs["p99"] || res.ExtendEveryS != 0.4 {
		t.Fatalf("extend figures %v/s %v every %vs", res.ExtendsPerS, res.ExtendMs, res.ExtendEveryS)
	}
	if st := hc.Stats(); st.ConnsRevised == 0 || st.ConnsOpen > 2 || st.Extended == 0 {
		t.Fatalf("holders' client %+v: want its connections revised, at most 2, and extends", st)
	}
	for _, k := range []string{"bench/hold/0", "bench/hold/299"} {
		tk, err := pairs.Acquire(context.Background(), k, 0, client.AcquireOptions{})
		if err != nil {
			t.Fatalf("%s after the run: %v, want it free", k, err)
		}
		tk.Release(context.Background())
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, res); err != nil || !strings.Contains(buf.String(), "holders 300  (300 took their key") ||
		!strings.Contains(buf.String(), "extends failed 0") {
		t.Fatalf("report (%v):\n%s", err, buf.String())
	}
}

// Holders on connections without revision 2: every extend fails (unsupported) and is
// counted and reported; the holders still give their keys back.
func TestHoldersReportFailedExtends(t *testing.T) {
	ts := servertest.Start(t, cluster.DefaultConfig(), server.Config{})
	pairs := holdersClient(t, ts.Addr, 1, false)
	hc := holdersClient(t, ts.Addr, 1, true)
	res := Run(context.Background(), Config{
		Clients: []*client.Client{pairs}, Keys: 1, Prefix: "bench/", Duration: 500 * time.Millisecond,
		Options: client.AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second},
		Holders: Holders{Count: 10, Client: hc, Every: 100 * time.Millisecond, Lease: 5 * time.Second},
	})
	if res.HoldersHeld != 10 || res.ExtendsFailed == 0 || res.ExtendsFailed != res.HoldErrors["extend: unsupported"] || res.Extends != 0 {
		t.Fatalf("holders in %+v: want every extend failed unsupported", res)
	}
	var buf bytes.Buffer
	WriteText(&buf, res)
	if !strings.Contains(buf.String(), "hold extend: unsupported") {
		t.Fatalf("report does not name the failed extends:\n%s", buf.String())
	}
	tk, err := pairs.Acquire(context.Background(), "bench/hold/9", 0, client.AcquireOptions{})
	if err != nil {
		t.Fatalf("a holder's key after the run: %v, want it free", err)
	}
	tk.Release(context.Background())
}

func TestHoldersValidate(t *testing.T) {
	cl := &client.Client{}
	for _, tc := range []struct {
		hs Holders
		ok bool
	}{
		{Holders{}, true},
		{Holders{Count: -1}, false},
		{Holders{Count: 1, Every: time.Second, Lease: 3 * time.Second}, false}, // no client
		{Holders{Count: 1, Client: cl, Lease: 3 * time.Second}, false},
		{Holders{Count: 1, Client: cl, Every: time.Second, Lease: 500 * time.Millisecond}, false},
		{Holders{Count: 1, Client: cl, Every: 10 * time.Second, Lease: 10 * time.Second}, false},
		{Holders{Count: 1, Client: cl, Every: 10 * time.Second, Lease: 2 * time.Hour}, false},
		{Holders{Count: 10000, Client: cl, Every: 10 * time.Second, Lease: 30 * time.Second}, true},
	} {
		if err := tc.hs.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.hs, err, tc.ok)
		}
	}
}
