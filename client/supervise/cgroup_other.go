//go:build !linux

package supervise

import (
	"errors"
	"syscall"
)

// cgroup is Linux's; elsewhere a command has none, and what leaves its process group is
// neither killed nor found at the end.
type cgroup struct{}

var errCgroupLinux = errors.New("cgroups are Linux's")

func commandCgroup(int) (*cgroup, error) { return nil, errCgroupLinux }
func newCgroup(string) (*cgroup, error)  { return nil, errCgroupLinux }

// CheckCgroup says why Start cannot put a command in a cgroup of its own here: never, off Linux.
func CheckCgroup() error { return errCgroupLinux }

func (*cgroup) into(*syscall.SysProcAttr) {}
func (*cgroup) drain() ([]int, error)     { return nil, nil }
func (*cgroup) killAll()                  {}

// escapeMark is "": nothing marks the command's environment, as nothing would read it.
func escapeMark(int) string { return "" }

func escapees(string, int) []int { return nil }
