package supervise

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupDrain bounds how long the end of a command waits for its cgroup to empty after
// SIGKILL (a process in uninterruptible sleep dies only once its I/O returns).
const cgroupDrain = 10 * time.Second

// escapeEnv marks the environment of a command that has no cgroup: what it starts inherits
// it, so that what left the group can be found (escapees) and named at the end.
const escapeEnv = "LATCH_SUPERVISE_RUN"

// cgroup is the command's cgroup: a child of latch's own v2 cgroup, named for the guard. The
// command is cloned into it (clone3 with CLONE_INTO_CGROUP), so it is there before it execs
// anything, and all it starts is there too unless moved by a process allowed to (root):
// killing the cgroup reaches what left the process group or the session.
type cgroup struct {
	dir  string // its directory in the cgroup2 mount
	path string // its path as /proc/PID/cgroup names it
	fd   int    // dir, open for clone3 until the command started; -1 after
	// noKillFile kills as on a kernel without cgroup.kill (before 5.14): freeze, then
	// SIGKILL each process. Tests only.
	noKillFile bool
}

// ownCgroup2 is this process's v2 cgroup: its directory and its path.
func ownCgroup2() (dir, path string, err error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	dir, err = cgroupDirOf(string(mi), string(pc))
	path, _ = ownCgroup(string(pc))
	return dir, path, err
}

// commandCgroup is the cgroup of the command that guard guards, a child of this process's
// own cgroup, without creating it: the guard, a child of latch in latch's cgroup, finds the
// cgroup latch made for its command so.
func commandCgroup(guard int) (*cgroup, error) { return childCgroup(cgroupName(guard)) }

// childCgroup is the child called name of this process's own cgroup, not created here.
func childCgroup(name string) (*cgroup, error) {
	own, path, err := ownCgroup2()
	if err != nil {
		return nil, err
	}
	return &cgroup{dir: filepath.Join(own, name), path: strings.TrimSuffix(path, "/") + "/" + name, fd: -1}, nil
}

// newCgroup creates the child called name of this process's own cgroup, for a command. An
// error says why there is none: no cgroup v2, or no right to create a child there. That is
// the whole check, so root and a user with a delegated cgroup (systemd Delegate=yes) are
// alike.
func newCgroup(name string) (*cgroup, error) {
	c, err := childCgroup(name)
	if err != nil {
		return nil, err
	}
	err = os.Mkdir(c.dir, 0o755)
	if errors.Is(err, fs.ErrExist) && rmTree(c.dir) == nil { // an empty one left by an earlier guard of this pid
		err = os.Mkdir(c.dir, 0o755)
	}
	if err != nil {
		return nil, err
	}
	if c.fd, err = unix.Open(c.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		rmTree(c.dir)
		return nil, &fs.PathError{Op: "open", Path: c.dir, Err: err}
	}
	return c, nil
}

// CheckCgroup says why Start cannot put a command in a cgroup of its own here, or nil when it
// can: it creates such a cgroup and removes it again.
func CheckCgroup() error {
	c, err := newCgroup(uniqueCgroupName("latch-check-"))
	if err != nil {
		return err
	}
	_, err = c.drain()
	return err
}

// into makes the process started with attr begin in the cgroup.
func (c *cgroup) into(attr *syscall.SysProcAttr) { attr.UseCgroupFD, attr.CgroupFD = true, c.fd }

// drain kills every process in the cgroup and below it (a nested latch run's cgroup), waits
// until none is left, at most cgroupDrain, and removes the directories. It returns the
// processes it found, and an error when some are still there at the end (the directory then
// stays). A cgroup that is gone already (the guard drained it at its deadline) is drained.
func (c *cgroup) drain() ([]int, error) {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	var found []int
	end := time.Now().Add(cgroupDrain)
	for nap := time.Millisecond; ; nap = min(2*nap, 50*time.Millisecond) {
		pids, err := procsBelow(c.dir)
		if errors.Is(err, fs.ErrNotExist) {
			return found, nil
		}
		for _, pid := range pids {
			if !slices.Contains(found, pid) {
				found = append(found, pid)
			}
		}
		if len(pids) == 0 {
			// EBUSY while the last process is still on its way out; any other error leaves
			// an empty directory behind, which holds nothing that runs.
			if err := rmTree(c.dir); !errors.Is(err, unix.EBUSY) || time.Now().After(end) {
				return found, nil
			}
		} else if time.Now().After(end) {
			return found, fmt.Errorf("%s of the command still in cgroup %s %s after SIGKILL: %s", processes(len(pids)), c.dir, cgroupDrain, pidList(pids))
		} else {
			c.kill(pids)
		}
		time.Sleep(nap)
	}
}

// killAll sends SIGKILL to everything in the cgroup and below it, without waiting.
func (c *cgroup) killAll() {
	if pids, err := procsBelow(c.dir); err == nil && len(pids) > 0 {
		c.kill(pids)
	}
}

// kill sends SIGKILL to everything in the cgroup: through cgroup.kill (Linux 5.14), which
// also catches forks racing with it, or else by freezing the cgroup (5.2), so that nothing
// forks meanwhile, and signalling each of pids (a frozen process dies of SIGKILL).
func (c *cgroup) kill(pids []int) {
	if !c.noKillFile && os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	os.WriteFile(filepath.Join(c.dir, "cgroup.freeze"), []byte("1"), 0)
	for _, pid := range pids {
		c.killOne(pid)
	}
}

// killOne sends SIGKILL to pid if it is still in the cgroup: through a pidfd, which keeps the
// pid from being reused by another process between the check and the signal (Linux 5.3).
func (c *cgroup) killOne(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			unix.Kill(pid, unix.SIGKILL)
		}
		return
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if p, ok := ownCgroup(string(b)); err == nil && ok && (p == c.path || strings.HasPrefix(p, c.path+"/")) {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// procsBelow lists the processes in the cgroup at dir and in those below it. An error that
// is fs.ErrNotExist means dir is gone.
func procsBelow(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			more, _ := procsBelow(filepath.Join(dir, e.Name()))
			pids = append(pids, more...)
		}
	}
	return pids, nil
}

// rmTree removes the empty cgroup dir and the cgroups below it, deepest first.
func rmTree(dir string) error {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			rmTree(filepath.Join(dir, e.Name()))
		}
	}
	if err := unix.Rmdir(dir); err != nil {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// uniqueCgroupName is prefix, this process's pid and a random part: a name no other caller
// uses at the same time.
func uniqueCgroupName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
}

// escapeMark is the variable (NAME=VALUE) that marks the environment of a command without a
// cgroup: the guard's pid and a random part, so that no other run has it.
func escapeMark(guard int) string {
	b := make([]byte, 8)
	rand.Read(b)
	return escapeEnv + "=" + strconv.Itoa(guard) + "." + hex.EncodeToString(b)
}

// escapees lists the live processes whose environment holds mark, beside those of process
// group pgid (just sent SIGKILL): what the command started that left its group (setsid, a
// daemon's double fork). A process that replaced its environment is not found, nor one of
// another user when latch is not root.
func escapees(mark string, pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(v []byte) bool { return string(v) == mark }) {
			continue
		}
		if state, pg, ok := procStat(e.Name()); ok && state != 'Z' && state != 'X' && pg != pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat is the state letter and the process group of pid, from /proc/PID/stat: the fields
// after the command name, which is in parentheses and may hold any of them.
func procStat(pid string) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || f[0] == "" {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(f[2])
	return f[0][0], pgid, err == nil
}
