package supervise

import "testing"

// The mountinfo lines of the hosts latch runs on: a systemd host (cgroup2 at /sys/fs/cgroup),
// a hybrid one (cgroup2 at /sys/fs/cgroup/unified beside v1 controllers), a container that
// sees only its own part of the hierarchy, and a mount point with a space.
const (
	mountTmpfs   = "25 1 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755"
	mountV1      = "27 25 0:24 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory"
	mountSystemd = "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot"
	mountHybrid  = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw"
	mountPod     = "612 600 0:26 /kubepods/pod1 /sys/fs/cgroup ro,nosuid shared:4 master:2 - cgroup2 cgroup2 rw"
	mountSpace   = `70 24 0:26 / /mnt/cg\040two rw - cgroup2 none rw`
)

func TestCgroupDirOf(t *testing.T) {
	for _, c := range []struct {
		name, mountinfo, cgroup, want string
	}{
		{"systemd", mountTmpfs + "\n" + mountSystemd, "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run.service\n",
			"/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run.service"},
		{"hybrid, at the root", mountTmpfs + "\n" + mountV1 + "\n" + mountHybrid, "4:memory:/x\n1:name=systemd:/\n0::/\n", "/sys/fs/cgroup/unified"},
		{"pod, below its root", mountPod, "0::/kubepods/pod1/c1", "/sys/fs/cgroup/c1"},
		{"pod, at its root", mountPod, "0::/kubepods/pod1\n", "/sys/fs/cgroup"},
		{"escaped mount point", mountSpace, "0::/a", "/mnt/cg two/a"},
		{"the first mount that shows it", mountPod + "\n" + mountSystemd, "0::/system.slice/x.service", "/sys/fs/cgroup/system.slice/x.service"},
		{"outside the mount's root", mountPod, "0::/kubepods/pod2/c1", ""},
		{"a prefix is not a parent", mountPod, "0::/kubepods/pod10", ""},
		{"v1 only", mountTmpfs + "\n" + mountV1, "4:memory:/x\n", ""},
		{"no 0:: line", mountSystemd, "4:memory:/x\n", ""},
		{"outside the cgroup namespace", mountSystemd, "0::/../../x", ""},
		{"a removed cgroup", mountSystemd, "0::/x (deleted)", ""},
		{"v1 mounts only", mountV1, "0::/", ""},
		{"a torn line", "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2", "0::/", ""},
		{"a bad escape", `70 24 0:26 / /mnt/cg\04 rw - cgroup2 none rw`, "0::/", ""},
		{"empty", "", "", ""},
	} {
		got, err := cgroupDirOf(c.mountinfo, c.cgroup)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

func TestPidList(t *testing.T) {
	for _, c := range []struct {
		pids []int
		want string
	}{
		{[]int{7}, "7"},
		{[]int{7, 8}, "7, 8"},
		{[]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"},
		{[]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more"},
	} {
		if got := pidList(c.pids); got != c.want {
			t.Errorf("pidList(%v) = %q, want %q", c.pids, got, c.want)
		}
	}
	if processes(1) != "1 process" || processes(2) != "2 processes" {
		t.Errorf("processes: %q, %q", processes(1), processes(2))
	}
}
