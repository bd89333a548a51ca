package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest/procstat"
)

// The test binary is its own guard: Start re-executes os.Executable.
func TestMain(m *testing.M) {
	if IsGuard() {
		os.Exit(GuardMain())
	}
	os.Exit(m.Run())
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := Resolve("sh"); err != nil || !filepath.IsAbs(p) {
		t.Fatalf("Resolve(sh) = %q, %v", p, err)
	}
	for _, c := range []struct {
		name     string
		notFound bool
	}{
		{"no-such-command-latch-test", true},
		{filepath.Join(dir, "missing.sh"), true},
		{"", true},
		{plain, false}, // no execute bit
		{dir, false},   // a directory
	} {
		_, err := Resolve(c.name)
		var re *ResolveError
		if !errors.As(err, &re) || re.NotFound != c.notFound {
			t.Errorf("Resolve(%q) = %v, want a ResolveError with NotFound %v", c.name, err, c.notFound)
		}
	}
}

// start starts sh -c script in a guarded group, with no terminal.
func start(t *testing.T, script string, args ...string) *Group {
	t.Helper()
	return startSpec(t, Spec{}, script, args...)
}

// startSpec is start with the rest of s (KillAt).
func startSpec(t *testing.T, s Spec, script string, args ...string) *Group {
	t.Helper()
	path, err := Resolve("sh")
	if err != nil {
		t.Fatal(err)
	}
	s.Path, s.Args, s.Env, s.Stdout, s.Stderr = path, append([]string{"sh", "-c", script, "sh"}, args...), os.Environ(), os.Stderr, os.Stderr
	g, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// waitFile waits up to 10 s for path to hold a line and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("%s was not written within 10 s", path)
	return ""
}

func pidIn(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(waitFile(t, path))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// gone waits up to 5 s for pid to be dead.
func gone(t *testing.T, pid int, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); procstat.Alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
	}
}

func supervise(t *testing.T, g *Group, p Plan) Outcome {
	t.Helper()
	res := make(chan Outcome, 1)
	go func() { res <- g.Supervise(p) }()
	select {
	case o := <-res:
		return o
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not end within 30 s")
	}
	return Outcome{}
}

func TestExitStatusAndLeftoversKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	g := start(t, `sleep 60 & echo $! > "$1"; exit 3`, pidFile)
	child := pidIn(t, pidFile)
	o := supervise(t, g, Plan{})
	if o.State.ExitCode() != 3 || o.LeaseEnded || o.Escalated {
		t.Fatalf("outcome %+v (%v), want exit 3", o, o.State)
	}
	gone(t, child, "the command's background child")
	if pids := procstat.Group(g.Pgid()); len(pids) > 0 {
		t.Fatalf("the group %d still has live processes %v", g.Pgid(), pids)
	}
}

func TestLeaseTimersTermThenKill(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "term")
	g := start(t, `trap 'echo term >> "$1"' TERM; echo up >> "$1"; while :; do sleep 0.05; done`, mark)
	waitFile(t, mark)
	now := time.Now()
	o := supervise(t, g, Plan{Deadline: now.Add(1500*time.Millisecond + KillMargin), Schedule: Schedule{Grace: 1300*time.Millisecond + KillMargin}})
	ws := o.State.Sys().(syscall.WaitStatus)
	if !o.LeaseEnded || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("outcome %+v (%v), want killed at the lease end", o, o.State)
	}
	if b, _ := os.ReadFile(mark); !strings.Contains(string(b), "term") {
		t.Fatalf("the command never saw SIGTERM: %q", b)
	}
}

func TestSecondSignalKillsAtOnce(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "int")
	g := start(t, `trap 'echo int >> "$1"' INT TERM; echo up > "$1"; while :; do sleep 0.05; done`, mark)
	waitFile(t, mark)
	sigs := make(chan os.Signal, 2)
	res := make(chan Outcome, 1)
	go func() {
		res <- g.Supervise(Plan{Signals: sigs, Deadline: time.Now().Add(time.Minute), Schedule: Schedule{Grace: 30 * time.Second}})
	}()
	sigs <- syscall.SIGINT
	// The first is the command's: it handles it and keeps running; the guard's echo of it
	// is not a second signal.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(mark)
		if strings.Contains(string(b), "int") && g.echoed.Load() == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after one SIGINT: marks %q, echoes %d", b, g.echoed.Load())
		}
	}
	select {
	case o := <-res:
		t.Fatalf("one signal ended the command: %+v", o)
	default:
	}
	sigs <- syscall.SIGTERM
	select {
	case o := <-res:
		ws := o.State.Sys().(syscall.WaitStatus)
		if !o.Escalated || o.LeaseEnded || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("outcome %+v (%v), want SIGKILL on the second signal", o, o.State)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second signal did not kill the command")
	}
}

// TestGuardKillsGroupWhenLatchGoes closes latch's end of the guard's pipe, as the kernel does
// when latch dies: the guard kills the whole group.
func TestGuardKillsGroupWhenLatchGoes(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	g := start(t, `sleep 60 & echo $! > "$1"; sleep 60`, pidFile)
	child := pidIn(t, pidFile)
	g.ctl.Close()
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the command outlived latch's end of the guard pipe")
	}
	ws := g.State().Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("command ended with %v, want SIGKILL", g.State())
	}
	gone(t, child, "the command's background child")
	select {
	case <-g.guarded:
	case <-time.After(10 * time.Second):
		t.Fatal("the guard did not exit")
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	_, err := Start(Spec{Path: filepath.Join(t.TempDir(), "none"), Args: []string{"none"}})
	if err == nil {
		t.Fatal("Start of a missing file succeeded")
	}
}
