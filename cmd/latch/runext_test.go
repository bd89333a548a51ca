//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest/procstat"
	"github.com/latchd/latch/expiry"
)

// Issue 21: `latch run` extends its lease while the command runs. With a 3 s lease, a
// command of 10 s runs to its end and exits 0; LATCH_DEADLINE is the first deadline.
func TestRunExtendsPastTheLease(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	dl := filepath.Join(t.TempDir(), "deadline")
	begin := time.Now()
	_, out, done := start(t, nil, "run", "--servers="+p.listen, "--lease", "3s", "--kill-grace", "1s", "ext/k", "--",
		"sh", "-c", `echo "$LATCH_DEADLINE" > "$1"; sleep 10`, "sh", dl)
	if code := exitWithin(t, done, 60*time.Second, "latch run of a 10 s command with a 3 s lease", out); code != 0 {
		t.Fatalf("latch run: exit %d, want 0 (extended):\n%s", code, out.String())
	}
	if took := time.Since(begin); took < 10*time.Second {
		t.Fatalf("latch run ended after %v, before its command's 10 s", took)
	}
	first, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(readFile(t, dl)))
	// The first deadline: the 3 s lease from the acquire (a process start or two after begin).
	if err != nil || first.Before(begin) || first.Sub(begin) > 5*time.Second {
		t.Fatalf("LATCH_DEADLINE %q (%v): want the first deadline, about 3 s after the start", readFile(t, dl), err)
	}
	if strings.Contains(out.String(), "SIGTERM") || strings.Contains(out.String(), "cannot extend") {
		t.Fatalf("latch run said:\n%s", out.String())
	}
}

// kill -9 of an extending `latch run` frees its key within the lease: the guard kills the
// command at once, and no extension follows.
func TestRunKill9FreesTheKeyWithinTheLease(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd, out, _ := start(t, nil, "run", srv, "--lease", "3s", "--kill-grace", "1s", "k9/ext", "--",
		"sh", "-c", `echo $$ > "$1"; while :; do sleep 0.1; done`, "sh", pidFile)
	sh := waitPid(t, pidFile)
	time.Sleep(7 * time.Second) // more than two leases: only extensions keep it running
	if !procstat.Alive(sh) {
		t.Fatalf("the command did not outlive two leases:\n%s", out.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	bound := 3*time.Second + expiry.SweepInterval + 3*time.Second // lease, sweep, and a loaded machine
	for {
		code, got := run(t, nil, "acquire", srv, "k9/ext")
		if code == 0 {
			t.Logf("the key was free %v after kill -9 of latch run (lease 3 s)", time.Since(killed))
			break
		}
		if code != exitNotAcquired {
			t.Fatalf("acquire: exit %d: %s", code, got)
		}
		if time.Since(killed) > bound {
			t.Fatalf("the key is still held %v after kill -9 of latch run with a 3 s lease:\n%s", time.Since(killed), out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if procstat.Alive(sh) {
		t.Fatal("the command outlived latch run")
	}
}

// Issue 21: a waiter's lease starts at its grant, not when it asked. `latch run --wait`
// behind a holder runs its command with (about) the whole lease left.
func TestRunWaitBehindAHolderGetsItsFullLease(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen
	if code, got := run(t, nil, "acquire", srv, "--lease", "4s", "wait/ext"); code != 0 {
		t.Fatalf("acquire: exit %d, %s", code, got)
	}
	dl := filepath.Join(t.TempDir(), "deadline")
	begin := time.Now()
	_, out, done := start(t, nil, "run", srv, "--wait", "60s", "--lease", "20s", "--kill-grace", "2s", "wait/ext", "--",
		"sh", "-c", `echo "$LATCH_DEADLINE" > "$1"`, "sh", dl)
	var line string
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(dl); err == nil && strings.HasSuffix(string(b), "\n") {
			line = strings.TrimSpace(string(b))
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the command did not run within 60 s:\n%s", out.String())
		}
	}
	ran := time.Now()
	if code := exitWithin(t, done, 30*time.Second, "latch run --wait", out); code != 0 {
		t.Fatalf("latch run --wait: exit %d:\n%s", code, out.String())
	}
	deadline, err := time.Parse(time.RFC3339Nano, line)
	if err != nil {
		t.Fatal(err)
	}
	waited, left := ran.Sub(begin), deadline.Sub(ran)
	t.Logf("waited %v behind a 4 s holder, then ran with %v of a 20 s lease left", waited, left)
	// Counted from the request, the lease would have at most 20 s - 4 s left.
	if waited < 3*time.Second || left < 17500*time.Millisecond {
		t.Fatalf("waited %v, then ran with %v of the 20 s lease left; want the whole lease less a commit", waited, left)
	}
}

// --max-hold stops an extending command as at a lease end: SIGTERM, exit 79, and the lock is
// released.
func TestRunMaxHoldCuts(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen
	begin := time.Now()
	_, out, done := start(t, nil, "run", srv, "--lease", "3s", "--kill-grace", "1s", "--max-hold", "6s", "hold/ext", "--", "sleep", "60")
	code := exitWithin(t, done, 60*time.Second, "latch run --max-hold 6s", out)
	took := time.Since(begin)
	if code != exitKilled || !strings.Contains(out.String(), "--max-hold 6s was reached") {
		t.Fatalf("latch run --max-hold: exit %d, want %d:\n%s", code, exitKilled, out.String())
	}
	// The first lease's SIGTERM would have come at 2 s; the cap's comes at 5 s.
	if took < 4500*time.Millisecond || took > 30*time.Second {
		t.Fatalf("latch run --max-hold 6s --kill-grace 1s ended after %v, want about 5 s:\n%s", took, out.String())
	}
	if code, got := run(t, nil, "acquire", srv, "hold/ext"); code != 0 {
		t.Fatalf("the key is still held after --max-hold: exit %d, %s", code, got)
	}
}

// A stopped command (Ctrl-Z sends SIGTSTP; SIGSTOP here) is not extended: it gets SIGTERM at
// the end of the lease it had, and latch run exits 79.
func TestRunStoppedCommandIsNotExtended(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, out, done := start(t, nil, "run", "--servers="+p.listen, "--lease", "3s", "--kill-grace", "1s", "stop/ext", "--",
		"sh", "-c", `echo $$ > "$1"; while :; do sleep 0.1; done`, "sh", pidFile)
	sh := waitPid(t, pidFile)
	time.Sleep(4 * time.Second) // past the first lease: extended
	syscall.Kill(sh, syscall.SIGSTOP)
	stopped := time.Now()
	code := exitWithin(t, done, 30*time.Second, "latch run of a stopped command", out)
	if code != exitKilled || !strings.Contains(out.String(), "is stopped; its lease is not extended") {
		t.Fatalf("latch run of a stopped command: exit %d, want %d:\n%s", code, exitKilled, out.String())
	}
	if took := time.Since(stopped); took > 15*time.Second {
		t.Fatalf("the stopped command was stopped %v after SIGSTOP, want within the 3 s lease", took)
	}
}

// A stopped `latch run` (SIGSTOP) cannot keep its command running past the lease: the guard
// kills the group at the kill deadline by itself; resumed, latch run says the lease ended.
func TestRunStoppedLatchCannotOverrunTheLease(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd, out, done := start(t, nil, "run", "--servers="+p.listen, "--lease", "3s", "--kill-grace", "1s", "frozen/ext", "--",
		"sh", "-c", `echo $$ > "$1"; while :; do sleep 0.1; done`, "sh", pidFile)
	sh := waitPid(t, pidFile)
	cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) })
	stopped := time.Now()
	for procstat.Alive(sh) {
		if time.Since(stopped) > 15*time.Second {
			t.Fatalf("the command still runs %v after latch run was stopped, with a 3 s lease", time.Since(stopped))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	if code := exitWithin(t, done, 30*time.Second, "latch run, resumed", out); code != exitKilled {
		t.Fatalf("latch run resumed after the guard killed its command: exit %d, want %d:\n%s", code, exitKilled, out.String())
	}
}

// `latch extend KEY TOKEN`: 0 and the new deadline when extended (the key then outlives its
// first lease), 1 for a token that does not hold the key, 64 for bad input, 69 without a
// server.
func TestExtendVerb(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen
	code, got := run(t, nil, "acquire", srv, "--lease", "2s", "x/k")
	if code != 0 {
		t.Fatalf("acquire: exit %d, %s", code, got)
	}
	tok := strings.TrimPrefix(strings.SplitN(got, "\n", 2)[0], "token ")
	before := time.Now()
	code, got = run(t, nil, "extend", srv, "--lease", "30s", "x/k", tok)
	if code != 0 || !strings.HasPrefix(got, "deadline ") {
		t.Fatalf("extend: exit %d, %q", code, got)
	}
	dl, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(strings.TrimPrefix(got, "deadline ")))
	if err != nil || dl.Sub(before) < 25*time.Second || dl.Sub(before) > 31*time.Second {
		t.Fatalf("extend printed %q (%v), want a deadline 30 s on", got, err)
	}
	time.Sleep(3 * time.Second) // past the first lease
	if code, got := run(t, nil, "acquire", srv, "x/k"); code != exitNotAcquired {
		t.Fatalf("acquire of the extended key after its first lease: exit %d, want %d: %s", code, exitNotAcquired, got)
	}
	n, _ := strconv.ParseUint(tok, 10, 64)
	other := strconv.FormatUint(n+1, 10)
	for _, r := range []struct {
		args []string
		want int
	}{
		{[]string{"extend", srv, "x/k", other}, exitNotHeld},
		{[]string{"extend", srv, "free/k", tok}, exitNotHeld},
		{[]string{"extend", srv, "x/k", "0"}, exitUsage},        // no token is 0: refused before it is sent
		{[]string{"extend", srv, "x/k", "999999"}, exitNotHeld}, // another token
		{[]string{"extend", srv, "x/k"}, exitUsage},
		{[]string{"extend", srv, "x/k", "one"}, exitUsage},
		{[]string{"extend", srv, "x/k", tok, "--lease", "5s"}, exitUsage},
		{[]string{"extend", srv, "--lease", "0s", "x/k", tok}, exitUsage},
		{[]string{"extend", srv, "--lease", "2h", "x/k", tok}, exitUsage},
		{[]string{"extend", srv, "bad key", tok}, exitUsage},
		{[]string{"extend", "--servers=127.0.0.1:1", "x/k", tok}, exitUnavailable},
		{[]string{"release", srv, "x/k", tok}, 0},
		{[]string{"extend", srv, "x/k", tok}, exitNotHeld}, // released: never revived
	} {
		if code, got := run(t, nil, r.args...); code != r.want {
			t.Errorf("latch %s: exit %d, want %d: %s", strings.Join(r.args, " "), code, r.want, got)
		}
	}
}

// Against a latch/1 server (the previous build), nothing changes: `latch run` warns once
// that the server cannot extend and stops the command at the end of its first lease (79);
// `latch extend` exits 65.
func TestRunAndExtendOnALatch1Server(t *testing.T) {
	t.Parallel()
	prev, _ := prevLatch(t)
	p := startServerOf(t, prev, nil)
	srv := "--servers=" + p.listen
	begin := time.Now()
	_, out, done := start(t, nil, "run", srv, "--lease", "3s", "--kill-grace", "1s", "v1/k", "--", "sleep", "30")
	code := exitWithin(t, done, 30*time.Second, "latch run on a latch/1 server", out)
	if code != exitKilled || strings.Count(out.String(), "cannot extend") != 1 || time.Since(begin) > 20*time.Second {
		t.Fatalf("latch run on a latch/1 server: exit %d after %v, want %d at the lease's end with one warning:\n%s",
			code, time.Since(begin), exitKilled, out.String())
	}
	code, got := run(t, nil, "acquire", srv, "--lease", "30s", "v1/x")
	if code != 0 {
		t.Fatalf("acquire: exit %d, %s", code, got)
	}
	tok := strings.TrimPrefix(strings.SplitN(got, "\n", 2)[0], "token ")
	if code, got := run(t, nil, "extend", srv, "v1/x", tok); code != exitRefused || !strings.Contains(got, "unsupported") {
		t.Fatalf("extend on a latch/1 server: exit %d, want %d: %s", code, exitRefused, got)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
