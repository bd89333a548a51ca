package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/clustertest/procstat"
)

// escaping is a command that leaves two processes behind that outlive it, each with the
// argument marker: a daemon in a session of its own (setsid -f) and a double fork, which stays
// in the group. It writes the cgroup it runs in to $1.
const escaping = `cat /proc/self/cgroup > "$1"; setsid -f sleep "$2" </dev/null >/dev/null 2>&1; (sleep "$2" </dev/null >/dev/null 2>&1 &); echo ok`

// newMarker is an argument for sleep that no other process has: 300 seconds and a fraction.
// The processes that have it are killed when the test ends.
func newMarker(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("300.%d%09d", os.Getpid(), time.Now().Nanosecond())
	t.Cleanup(func() {
		for _, pid := range procstat.WithArg(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// needCgroup skips the test unless this process may make cgroups for its commands; under
// CI=true, as root, it fails instead: CI runs as root on a host with a writable cgroup2.
func needCgroup(t *testing.T) {
	t.Helper()
	err := CheckCgroup()
	switch {
	case err == nil:
	case os.Geteuid() == 0:
		clustertest.SkipUnlessCI(t, fmt.Sprintf("root, but no writable cgroup v2 here: %v", err))
	default:
		t.Skipf("no writable cgroup v2 here (not root, no delegated cgroup): %v", err)
	}
}

// A command in its own cgroup: what outlives it (a setsid daemon, a double fork) is killed,
// counted and reported before Supervise returns, and the cgroup is removed.
func TestCgroupKillsWhatOutlivesTheCommand(t *testing.T) {
	needCgroup(t)
	m := newMarker(t)
	where := filepath.Join(t.TempDir(), "cgroup")
	g := start(t, escaping, where, m)
	var events []Event
	o := supervise(t, g, Plan{Notice: func(e Event) { events = append(events, e) }})
	if o.State.ExitCode() != 0 || o.Undrained != nil || o.NoCgroup != nil {
		t.Fatalf("outcome %+v (%v)", o, o.State)
	}
	if b, _ := os.ReadFile(where); !strings.Contains(string(b), "0::") || !strings.Contains(string(b), "/"+cgroupName(g.Pgid())+"\n") {
		t.Fatalf("the command ran in %q, not in a cgroup of its own", b)
	}
	if left := procstat.AwaitArg(m, 0, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes %v outlived Supervise", left)
	}
	if len(o.Outlived) != 2 || len(events) != 1 || events[0].Kind != EventOutlived || len(events[0].Pids) != 2 {
		t.Fatalf("outlived %v, events %+v; want the two sleeps, in one EventOutlived", o.Outlived, events)
	}
	if _, err := os.Stat(g.cg.dir); !os.IsNotExist(err) {
		t.Fatalf("the cgroup %s is still there: %v", g.cg.dir, err)
	}
}

// On a kernel without cgroup.kill, drain freezes the cgroup and kills each process, until
// none is left, its children's cgroups (a nested latch run's) included.
func TestCgroupDrainWithoutKillFile(t *testing.T) {
	needCgroup(t)
	m := newMarker(t)
	c, err := newCgroup(uniqueCgroupName("latch-test-"))
	if err != nil {
		t.Fatal(err)
	}
	c.noKillFile = true
	t.Cleanup(func() { c.noKillFile = false; c.drain() })
	if err := os.Mkdir(filepath.Join(c.dir, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `sleep "$1" & sleep "$1" & wait`, "sh", m)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	c.into(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	nested := exec.Command("sleep", m)
	nested.SysProcAttr = &syscall.SysProcAttr{}
	(&cgroup{fd: mustOpen(t, filepath.Join(c.dir, "nested"))}).into(nested.SysProcAttr)
	if err := nested.Start(); err != nil {
		t.Fatal(err)
	}
	go nested.Wait()
	// sh, forked or not, has m in its arguments too.
	for end := time.Now().Add(20 * time.Second); len(procstat.WithArg(m)) < 4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the sleeps did not start within 20 s: %v", procstat.WithArg(m))
		}
	}
	found, err := c.drain()
	if err != nil || len(found) != 4 {
		t.Fatalf("drain: %v, %v; want sh and three sleeps", found, err)
	}
	if left := procstat.AwaitArg(m, 0, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes %v outlived drain", left)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Fatalf("the cgroup %s is still there: %v", c.dir, err)
	}
	<-waited
}

func mustOpen(t *testing.T, dir string) int {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return fd
}

// Without a cgroup, the double fork dies with the group as before, and the setsid daemon,
// which left it, is named in a warning, and left running.
func TestNoCgroupWarnsOfEscapees(t *testing.T) {
	m := newMarker(t)
	g := startSpec(t, Spec{noCgroup: true}, escaping, filepath.Join(t.TempDir(), "cgroup"), m)
	var events []Event
	o := supervise(t, g, Plan{Notice: func(e Event) { events = append(events, e) }})
	if o.State.ExitCode() != 0 || o.NoCgroup == nil || len(o.Outlived) != 0 {
		t.Fatalf("outcome %+v (%v)", o, o.State)
	}
	left := procstat.AwaitArg(m, 1, 10*time.Second)
	if len(o.Escaped) != 1 || len(left) != 1 || o.Escaped[0] != left[0] {
		t.Fatalf("escaped %v, still running %v; want the setsid daemon only", o.Escaped, left)
	}
	if len(events) != 1 || events[0].Kind != EventEscaped {
		t.Fatalf("events %+v, want one EventEscaped", events)
	}
	line := Subject{Command: "sh"}.Text(events[0])
	if want := fmt.Sprintf("sh left 1 process running outside its process group (pids %d), not killed", left[0]); !strings.Contains(line, want) {
		t.Fatalf("warning %q, want it to say %q", line, want)
	}
}

// When latch goes (its end of the guard's pipe closes), the guard kills the command's cgroup
// too, the setsid daemon in it included, and removes it.
func TestGuardKillsCgroupWhenLatchGoes(t *testing.T) {
	needCgroup(t)
	m := newMarker(t)
	g := start(t, `setsid -f sleep "$1" </dev/null >/dev/null 2>&1; exec sleep "$1"`, m)
	for end := time.Now().Add(20 * time.Second); len(procstat.WithArg(m)) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the sleeps did not start within 20 s: %v", procstat.WithArg(m))
		}
	}
	g.ctl.Close()
	select {
	case <-g.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the command outlived latch's end of the guard pipe")
	}
	if left := procstat.AwaitArg(m, 0, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes %v of the cgroup outlived latch", left)
	}
	select {
	case <-g.guarded:
	case <-time.After(20 * time.Second):
		t.Fatal("the guard did not exit")
	}
	if _, err := os.Stat(g.cg.dir); !os.IsNotExist(err) {
		t.Fatalf("the guard left the cgroup %s: %v", g.cg.dir, err)
	}
}
