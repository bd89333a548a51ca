package procstat

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestAliveGroupAndPgid(t *testing.T) {
	self := os.Getpid()
	if !Alive(self) {
		t.Fatalf("Alive(%d) (this test) is false", self)
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if pg, err := Pgid(pid); err != nil || pg != pid {
		t.Fatalf("Pgid of a group leader %d: %d, %v", pid, pg, err)
	}
	if g := Group(pid); len(g) != 1 || g[0] != pid {
		t.Fatalf("Group(%d): %v, want just the leader", pid, g)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Killed and not reaped yet, it is a zombie: not alive, not in its group.
	for end := time.Now().Add(5 * time.Second); Alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d still alive 5 s after SIGKILL", pid)
		}
	}
	if g := Group(pid); len(g) != 0 {
		t.Fatalf("Group(%d) after SIGKILL: %v", pid, g)
	}
	cmd.Wait()
	if Alive(pid) {
		t.Fatalf("Alive(%d) after it was reaped", pid)
	}
	if _, err := Pgid(pid); err == nil {
		t.Fatalf("Pgid(%d) of a reaped process: no error", pid)
	}
}

func TestTreeAndState(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the cleanup kills the sleep too
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sh: %v", err)
	}
	root := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-root, syscall.SIGKILL); cmd.Wait() })
	var tree []int
	for end := time.Now().Add(10 * time.Second); len(tree) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("Tree(%d) = %v after 10 s, want sh and its sleep", root, tree)
		}
		tree = Tree(root)
	}
	if tree[0] != root || len(tree) != 2 {
		t.Fatalf("Tree(%d) = %v, want sh first and its one child", root, tree)
	}
	child := tree[1]
	if err := syscall.Kill(child, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); State(child) != 'T'; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("State(%d) = %q 10 s after SIGSTOP, want 'T'", child, State(child))
		}
	}
	syscall.Kill(child, syscall.SIGKILL)
	syscall.Kill(root, syscall.SIGKILL)
	cmd.Wait()
	for end := time.Now().Add(10 * time.Second); State(child) != 0 && State(child) != 'Z'; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("State(%d) = %q 10 s after SIGKILL", child, State(child))
		}
	}
	if State(root) != 0 {
		t.Fatalf("State(%d) of a reaped process = %q, want 0", root, State(root))
	}
}
