package supervise

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// The parsing half of the command's cgroup (cgroup_linux.go has the other): pure functions of
// the text of /proc/self/mountinfo and /proc/self/cgroup, table-tested on any system.

// cgroupPrefix starts the name of the cgroup of a command; the guard's pid follows, unique
// while the guard lives, and the guard outlives the command.
const cgroupPrefix = "latch-run-"

// cgroupName is the name of the cgroup of the command that guard guards.
func cgroupName(guard int) string { return cgroupPrefix + strconv.Itoa(guard) }

// errNoCgroup2 is why a system without a cgroup2 mount, or a process outside it, has no
// cgroup for the command.
var errNoCgroup2 = errors.New("no cgroup v2 hierarchy holds this process")

// cgroupDirOf is the directory, in the first cgroup2 mount of mountinfo that shows it, of the
// v2 cgroup that procCgroup (the "0::PATH" line of /proc/PID/cgroup) names.
func cgroupDirOf(mountinfo, procCgroup string) (string, error) {
	own, ok := ownCgroup(procCgroup)
	if !ok {
		return "", errNoCgroup2
	}
	for _, line := range strings.Split(mountinfo, "\n") {
		point, root, ok := cgroup2Mount(line)
		if !ok {
			continue
		}
		if dir, ok := cgroupDir(point, root, own); ok {
			return dir, nil
		}
	}
	return "", errNoCgroup2
}

// ownCgroup is the path of the "0::" line of /proc/PID/cgroup (the unified hierarchy's), if
// there is one that names a cgroup inside this cgroup namespace.
func ownCgroup(procCgroup string) (string, bool) {
	for _, line := range strings.Split(procCgroup, "\n") {
		p, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		// Outside the namespace's root the path climbs ("/../x"); a removed cgroup has a
		// " (deleted)" suffix. Neither can take a child.
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "/..") || strings.HasSuffix(p, " (deleted)") {
			return "", false
		}
		return path.Clean(p), true
	}
	return "", false
}

// cgroup2Mount reads one line of /proc/PID/mountinfo: the mount point and the root (the
// cgroup the mount shows at its top) of a cgroup2 mount. The fields are "ID PARENT MAJ:MIN
// ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS", with spaces and the like in
// paths as octal escapes.
func cgroup2Mount(line string) (point, root string, ok bool) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+3 > len(f) || f[sep+1] != "cgroup2" {
		return "", "", false
	}
	root, ok1 := unescapeMount(f[3])
	point, ok2 := unescapeMount(f[4])
	return point, root, ok1 && ok2
}

// cgroupDir is where cgroup own is in a cgroup2 mount at point that shows root at its top.
func cgroupDir(point, root, own string) (string, bool) {
	root = path.Clean(root)
	switch {
	case root == "/":
		return path.Join(point, own), true
	case own == root:
		return point, true
	case strings.HasPrefix(own, root+"/"):
		return path.Join(point, own[len(root):]), true
	}
	return "", false
}

// unescapeMount undoes mountinfo's escapes: a backslash and three octal digits.
func unescapeMount(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", false
		}
		n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String(), true
}

// pidList names pids for a notice: all of them up to ten, then how many more.
func pidList(pids []int) string {
	const most = 10
	var b strings.Builder
	for i, pid := range pids {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(pids)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(pid))
	}
	return b.String()
}

// processes is "1 process" or "N processes".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return strconv.Itoa(n) + " processes"
}
