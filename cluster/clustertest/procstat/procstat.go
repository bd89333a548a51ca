// Package procstat reads the state of processes from Linux's /proc, for tests that check
// that a process or a whole process group is gone. It is imported only by _test.go files.
package procstat

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// stat is the fields of /proc/PID/stat after the command name: "state ppid pgrp ...". The
// name is in parentheses and may itself hold spaces and parentheses, so the fields start
// after the last ')'.
func stat(pid string) ([]string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%s/stat: no command name in %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return nil, fmt.Errorf("/proc/%s/stat: too few fields in %q", pid, s)
	}
	return f, nil
}

// live reports whether state is that of a running process: not a zombie waiting to be
// reaped (an orphan killed with its group stays one until init reaps it), nor dead.
func live(state string) bool { return state != "Z" && state != "X" }

// Alive reports whether pid runs: it exists and is not a zombie.
func Alive(pid int) bool {
	f, err := stat(strconv.Itoa(pid))
	return err == nil && live(f[0])
}

// Pgid is the process group of pid.
func Pgid(pid int) (int, error) {
	f, err := stat(strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[2])
}

// Group lists the live (not zombie) processes of process group pgid.
func Group(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pgid)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := stat(e.Name()); err == nil && f[2] == want && live(f[0]) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// State is pid's state letter ('R' running, 'S' sleeping, 'T' stopped, 'Z' zombie, ...), or
// 0 when pid is gone.
func State(pid int) byte {
	f, err := stat(strconv.Itoa(pid))
	if err != nil {
		return 0
	}
	return f[0][0]
}

// Tree lists root and every process below it, parents before children.
func Tree(root int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := stat(e.Name()); err == nil {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], pid)
			}
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// WithArg lists the live processes that have arg as one of their arguments (argv[1:] or
// argv[0]), from /proc/PID/cmdline: a test gives a process an argument no other has (sleep
// 300.12345) to find it, and all it forked before exec, later.
func WithArg(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), arg) && Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// AwaitArg waits up to d for the live processes with the argument arg to be n (one killed may
// show as running a moment after its SIGKILL) and returns them, n or not.
func AwaitArg(arg string, n int, d time.Duration) []int {
	left := WithArg(arg)
	for end := time.Now().Add(d); len(left) != n && time.Now().Before(end); left = WithArg(arg) {
		time.Sleep(10 * time.Millisecond)
	}
	return left
}

// Cgroup2Dir is the directory of this process's cgroup v2: its "0::" path in /proc/self/cgroup
// below the first cgroup2 mount of the hierarchy's root in /proc/self/mountinfo (a host's
// mount; a container's of a part of it is not looked at).
func Cgroup2Dir() (string, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	_, own, ok := strings.Cut(string(cg), "0::")
	own, _, _ = strings.Cut(own, "\n")
	if !ok || !strings.HasPrefix(own, "/") {
		return "", fmt.Errorf("no cgroup v2 in /proc/self/cgroup: %q", cg)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if i := slices.Index(f, "-"); i > 4 && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
			return strings.TrimSuffix(f[4]+own, "/"), nil
		}
	}
	return "", fmt.Errorf("no cgroup2 mount of the hierarchy's root in /proc/self/mountinfo")
}
