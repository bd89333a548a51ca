package clustertest

import (
	"os"
	"testing"
	"time"
)

// Bound is the one limit, in every package's tests, on a wait for something that crosses
// goroutines or processes and should happen "soon": a reply, a close, an election, a
// condition polled with Eventually. It is generous on purpose (the machines are shared, two
// cores, sometimes under -race): a passing run never comes near it, so reaching it means the
// event is not coming, not that the machine was slow. A test must not assert that something
// happens faster than this; where a bound matters, it injects a clock instead.
const Bound = 30 * time.Second

// Eventually polls cond every 5 ms until it holds, and fails the test if it does not within
// the bound: a generous one, since these machines are shared and noisy.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Between fails the test unless lo <= d <= hi.
func Between(t testing.TB, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Fatalf("%s after %v, want between %v and %v", what, d.Round(time.Millisecond), lo, hi)
	}
}

// Slow marks a test that starts processes or runs for long: under -short it is skipped,
// saying what it does ("starts three processes"), otherwise it runs in parallel with the
// other slow tests.
func Slow(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip(what + "; skipped with -short")
	}
	t.Parallel()
}

// SkipUnlessCI skips the test, saying why (a tool or an input it needs is missing here),
// except under CI=true: CI provides what the suite needs, so there the missing piece is a
// broken setup and the test fails instead of hiding it behind a skip.
func SkipUnlessCI(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s", why)
	}
	t.Skip(why)
}

// NeedRoot skips the test unless this process runs as root, saying why it needs root
// ("creates network namespaces"); under CI=true it fails instead (see SkipUnlessCI): CI runs
// the suite as root, so there a missing root is a broken setup, not a reason to skip.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipUnlessCI(t, "needs root: "+why+"; run the tests as root to include it")
	}
}
