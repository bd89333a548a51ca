//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/latchd/latch/client/supervise"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/clustertest/procstat"
)

// pgidOf is the process group of pid.
func pgidOf(t *testing.T, pid int) int {
	t.Helper()
	pg, err := procstat.Pgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// Issue 13: kill -9 of latch run left its command running past the lease. Now the guard
// kills the command's whole group: a second later none of it is alive.
func TestRunKill9KillsTheCommandsGroup(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	dir := t.TempDir()
	childFile, shFile := filepath.Join(dir, "child"), filepath.Join(dir, "sh")
	// Output to a file, not a pipe: Wait must not wait for survivors holding the pipe.
	logf, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(latchBin, "run", "--servers="+p.listen, "--lease", "60s", "--kill-grace", "2s", "k9", "--",
		"sh", "-c", `sleep 60 & echo $! > "$1"; echo $$ > "$2"; while :; do sleep 0.1; done`, "sh", childFile, shFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	child, sh := waitPid(t, childFile), waitPid(t, shFile)
	pgid := pgidOf(t, sh)
	if pgid == pgidOf(t, os.Getpid()) || pgid != pgidOf(t, child) {
		t.Fatalf("the command's group %d: the test's is %d, its child's %d", pgid, pgidOf(t, os.Getpid()), pgidOf(t, child))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	for left := procstat.Group(pgid); len(left) > 0; left = procstat.Group(pgid) {
		if time.Since(killed) > time.Second {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("a second after kill -9 of latch run, processes %v of the command's group %d still run:\n%s", left, pgid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A first SIGTERM is the command's (it ignores it here); a second kills its group at once,
// long before the lease, and the lock is released.
func TestRunSecondSignalKillsTheGroup(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd, out, done := start(t, nil, "run", "--servers="+p.listen, "--lease", "60s", "--kill-grace", "2s", "sig/k", "--",
		"sh", "-c", `trap "" TERM INT; echo $$ > "$1"; while :; do sleep 0.1; done`, "sh", pidFile)
	pid := waitPid(t, pidFile)
	cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("one SIGTERM ended latch run: %v\n%s", err, out.String())
	default:
	}
	if !procstat.Alive(pid) {
		t.Fatal("one SIGTERM killed the command, which ignores it")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	code := exitWithin(t, done, 20*time.Second, "latch run, after a second SIGTERM (lease 60 s),", out)
	if code != 128+int(syscall.SIGKILL) || !strings.Contains(out.String(), "second signal") {
		t.Fatalf("latch run after a second SIGTERM: exit %d, want %d:\n%s", code, 128+int(syscall.SIGKILL), out.String())
	}
	if procstat.Alive(pid) {
		t.Fatal("the command outlived latch run")
	}
	if code, out := run(t, nil, "acquire", "--servers="+p.listen, "sig/k"); code != 0 || !strings.HasPrefix(out, "token 2") {
		t.Fatalf("acquire after run: exit %d, %q", code, out)
	}
}

// Issue 13: a grant the ticket gate refuses was released in the background after the CLI
// had exited, so never. Now the CLI waits for that release: exit 75, and the key is free.
func TestAcquireGateFailureReleasesBeforeExit(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen
	if code, out := run(t, nil, "acquire", srv, "--lease", "60s", "gate"); code != 0 {
		t.Fatalf("acquire: exit %d, %s", code, out)
	}
	// A waiter with a 4 s lease that needs 3 s of it. The grant age gives back its time in
	// the queue, so the waiter is stopped (SIGSTOP) while its grant is on the way and resumed
	// 2.5 s later: the ticket then has at most 1.5 s left, and the gate refuses it.
	cmd, out, done := start(t, nil, "acquire", srv, "--wait", "20s", "--lease", "4s", "--budget", "3s", "gate")
	for end := time.Now().Add(20 * time.Second); metric(p.http, "latch_waiters") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the waiter did not queue within 20 s:\n%s", out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code, out := run(t, nil, "release", srv, "gate", "1"); code != 0 {
		t.Fatalf("release: exit %d, %s", code, out)
	}
	time.Sleep(2500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	code := exitWithin(t, done, 30*time.Second, "acquire", out)
	if code != exitNotAcquired || !strings.Contains(out.String(), "not acquired: granted token 2 ") ||
		!strings.Contains(out.String(), "released again (confirmed)") || strings.Contains(out.String(), "outcome unknown") {
		t.Fatalf("acquire whose grant fails the gate: exit %d, want %d:\n%s", code, exitNotAcquired, out.String())
	}
	if code, out := run(t, nil, "acquire", srv, "gate"); code != 0 || !strings.HasPrefix(out, "token 3") {
		t.Fatalf("the refused grant still holds the key: exit %d, %q", code, out)
	}
}

// openPty opens a new pseudo-terminal pair.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// Issue 13: latch run's command never got the terminal, so an interactive one stopped on
// SIGTTIN. Under a shell on a real pty, the command reads a line typed at the terminal, and
// afterwards the terminal's foreground group is the shell's again (the shell reads the next).
func TestRunCommandReadsTheTerminal(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	master, slave := openPty(t)
	script := `"$0" run --servers "$1" --lease 30s --kill-grace 2s tty/k -- sh -c 'read x; echo "got $x"'; echo "latch-exit $?"; read y; echo "after $y"`
	sh := exec.Command("sh", "-c", script, latchBin, p.listen)
	sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	shDone := make(chan error, 1)
	go func() { shDone <- sh.Wait() }()
	t.Cleanup(func() { sh.Process.Kill() })
	slave.Close()
	out := &clustertest.Buffer{}
	go io.Copy(out, master)
	fg := func() int {
		pg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP)
		if err != nil {
			t.Fatalf("TIOCGPGRP: %v", err)
		}
		return pg
	}
	await := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not within 20 s; terminal output:\n%s", what, out.String())
			}
		}
	}
	shPid := sh.Process.Pid
	await("the command's group takes the terminal", func() bool { return fg() != shPid })
	master.Write([]byte("hello\n"))
	await("the command reads the terminal", func() bool { return strings.Contains(out.String(), "got hello") })
	await("latch run exits 0", func() bool { return strings.Contains(out.String(), "latch-exit 0") })
	if pg := fg(); pg != shPid {
		t.Fatalf("after latch run the terminal's foreground group is %d, not the shell's %d", pg, shPid)
	}
	master.Write([]byte("world\n"))
	await("the shell reads the terminal again", func() bool { return strings.Contains(out.String(), "after world") })
	if code := exitWithin(t, shDone, 20*time.Second, "the shell", out); code != 0 {
		t.Fatalf("shell: exit %d\n%s", code, out.String())
	}
}

// Issue 20: a command that daemonizes (setsid -f) or double-forks left processes running
// after latch run, and so after the lock. In a cgroup of its own (root, or a delegated cgroup)
// both die before the release, and latch run says how many; without one, the double fork dies
// with the group as before and the daemon, which left it, is named in a warning.
func TestRunKillsWhatOutlivesTheCommand(t *testing.T) {
	t.Parallel()
	cgErr := supervise.CheckCgroup()
	if cgErr != nil && os.Geteuid() == 0 && os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: root, but no writable cgroup v2 for latch run: %v", cgErr)
	}
	p := startServer(t, nil)
	m := fmt.Sprintf("300.%d%09d", os.Getpid(), time.Now().Nanosecond()) // sleep's argument, and no one else's
	t.Cleanup(func() {
		for _, pid := range procstat.WithArg(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	code, out := run(t, nil, "run", "--servers="+p.listen, "--lease", "60s", "escape/k", "--", "sh", "-c",
		`setsid -f sleep "$1" </dev/null >/dev/null 2>&1; (sleep "$1" </dev/null >/dev/null 2>&1 &); echo ok`, "sh", m)
	if code != 0 || !strings.HasPrefix(out, "ok\n") {
		t.Fatalf("latch run: exit %d:\n%s", code, out)
	}
	if cgErr == nil {
		if left := procstat.AwaitArg(m, 0, 10*time.Second); len(left) > 0 {
			t.Fatalf("processes %v outlived latch run in its cgroup:\n%s", left, out)
		}
		if !strings.Contains(out, "latch run: killed 2 processes that outlived sh (pids ") {
			t.Fatalf("latch run did not say it killed the two sleeps:\n%s", out)
		}
	} else {
		t.Logf("no cgroup here (%v): the warning", cgErr)
		left := procstat.AwaitArg(m, 1, 10*time.Second)
		if len(left) != 1 || !strings.Contains(out, fmt.Sprintf("latch run: warning: sh left 1 process running outside its process group (pids %d), not killed", left[0])) {
			t.Fatalf("still running %v; latch run said:\n%s", left, out)
		}
	}
	if code, out := run(t, nil, "acquire", "--servers="+p.listen, "escape/k"); code != 0 || !strings.HasPrefix(out, "token 2") {
		t.Fatalf("acquire after run: exit %d, %q", code, out)
	}
}

// Delegation: a user who is not root but owns a cgroup (what systemd's Delegate=yes gives a
// service) gets the same as root: latch run as nobody, started in a cgroup delegated to
// nobody, runs its command in a cgroup below it and kills what the command left.
func TestRunCgroupUnderDelegation(t *testing.T) {
	t.Parallel()
	clustertest.NeedRoot(t, "delegates a cgroup to nobody and runs latch run as nobody")
	if err := supervise.CheckCgroup(); err != nil {
		clustertest.SkipUnlessCI(t, fmt.Sprintf("root, but no writable cgroup v2 here: %v", err))
	}
	own, err := procstat.Cgroup2Dir()
	if err != nil {
		clustertest.SkipUnlessCI(t, err.Error())
	}
	const nobody = 65534
	deleg := filepath.Join(own, fmt.Sprintf("latch-test-delegated-%d", os.Getpid()))
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // last: the marked processes are killed first
		left, _ := filepath.Glob(filepath.Join(deleg, "latch-run-*"))
		for _, d := range left {
			syscall.Rmdir(d)
		}
		syscall.Rmdir(deleg)
	})
	for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(deleg, f), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := syscall.Open(deleg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	// A copy of the binary that nobody may run (the build's directory is root's alone).
	binDir := t.TempDir()
	bin := filepath.Join(binDir, "latch")
	if b, err := os.ReadFile(latchBin); err != nil || os.WriteFile(bin, b, 0o755) != nil || os.Chmod(binDir, 0o755) != nil {
		t.Fatalf("copying %s: %v", latchBin, err)
	}
	for d := filepath.Dir(binDir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	p := startServer(t, nil)
	m := fmt.Sprintf("300.%d%09d", os.Getpid(), time.Now().Nanosecond())
	t.Cleanup(func() {
		for _, pid := range procstat.WithArg(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	cmd := exec.Command(bin, "run", "--servers="+p.listen, "--lease", "60s", "delegated/k", "--", "sh", "-c",
		`cat /proc/self/cgroup; setsid -f sleep "$1" </dev/null >/dev/null 2>&1; (sleep "$1" </dev/null >/dev/null 2>&1 &)`, "sh", m)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, UseCgroupFD: true, CgroupFD: fd}
	out := &clustertest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	if code := exitWithin(t, done, 30*time.Second, "latch run as nobody", out); code != 0 {
		t.Fatalf("latch run as nobody: exit %d:\n%s", code, out.String())
	}
	if left := procstat.AwaitArg(m, 0, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes %v outlived latch run as nobody:\n%s", left, out.String())
	}
	if s := out.String(); !strings.Contains(s, filepath.Base(deleg)+"/latch-run-") || !strings.Contains(s, "latch run: killed 2 processes that outlived sh") {
		t.Fatalf("latch run as nobody did not run its command in a cgroup below %s, or did not kill the two sleeps:\n%s", deleg, s)
	}
}
