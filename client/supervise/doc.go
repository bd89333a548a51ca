// Package supervise runs the command of `latch run`: resolved before any lock is taken, in a
// process group (and, where it may, a cgroup) of its own that nothing of it outlives, in the
// terminal's foreground when latch has it, its lease extended while it runs, stopped before
// the lease ends. Any Go program that holds a lock while a command runs can use it the same
// way; its main must start with IsGuard and GuardMain, since the guard is the program itself
// run again.
//
// # The group and its guard
//
// Start first starts a guard: latch itself again (os.Executable), recognised by an
// environment variable, that does nothing but watch. The guard is the leader of a new
// process group; the command is then started into that group (setpgid to the guard's pid),
// so the command, everything it forks, and the guard share one process group id.
//
// The guard holds the read end of a pipe whose only write end is latch's. When latch exits
// in any way, SIGKILL included, the kernel closes that write end and the guard reads EOF; it
// then gives the terminal back to latch's original process group (when it had taken it) and
// sends SIGKILL to its own group: the command and all of its group die at once, and the
// guard with them. A parent-death signal would reach only a direct child, not the group, and
// a subreaper does not help when it is the subreaper that dies; a process inside the group
// that outlives latch does both jobs. Latch waits for the guard's "ready" byte before it
// starts the command, so there is no window in which the command runs unguarded. The guard
// ignores SIGTERM (sent to the group when the lease is ending), SIGTSTP, SIGTTIN and SIGTTOU.
// What the group cannot stop: a command that moves itself into another group or session
// (setsid, setpgid) leaves the group, as with flock(1) or any group-based supervisor (the
// cgroup, where there is one, still holds it), and a guard
// killed by the command itself (kill -9 0) no longer protects against latch's death (latch
// still kills the group at the end of the lease and when the command exits).
//
// The guard also holds the group's kill deadline: latch writes it on the same pipe before the
// command starts, and again whenever the stops move (later only after a confirmed extension).
// When it passes, the guard kills the group by itself, so a latch that is stopped (SIGSTOP),
// starved or slow cannot let the command outrun its lease. The deadline is sent as a reading of
// CLOCK_BOOTTIME, a clock both processes share that wall-clock steps do not move and that counts
// a suspend (the server's lease ran on); the guard looks at it at least every second.
//
// # The cgroup
//
// Where latch may create a child of its own cgroup v2 (root, or a cgroup delegated to its user;
// the check is the mkdir), the command also gets a cgroup of its own: latch-run-GUARDPID, a
// child of latch's cgroup (the "0::" line of /proc/self/cgroup, below the cgroup2 mount of
// /proc/self/mountinfo). The command is cloned into it (clone3 with CLONE_INTO_CGROUP), so it
// is there before it execs anything, and so is all it starts, whether it leaves the group and
// the session (setsid, a daemon's double fork) or not. When the command ends, by its exit,
// the lease's SIGKILL or a second signal, Close kills everything left in the cgroup
// (cgroup.kill; before Linux 5.14 a freeze and SIGKILL to each process), waits until it is
// empty and removes it; Supervise reports how many it killed (EventOutlived), and only then
// does a Job release the lock. What SIGKILL does not end within cgroupDrain (uninterruptible
// I/O) keeps the lock until its lease ends. The guard kills the cgroup in the same way before
// its group when latch dies or the kill deadline passes.
//
// Without such a cgroup (another OS, no cgroup v2, no right to create one there, a kernel
// without clone3 into a cgroup) the command runs as before, with a variable in its
// environment that marks it and what it starts (LATCH_SUPERVISE_RUN); at the end the
// processes so marked that left the group (which is killed as before) and still run are
// named in a warning (EventEscaped), and left alone. One that cleared its environment is not
// found.
//
// # Keeping the lease
//
// Schedule is the arithmetic (pure, table-tested): SIGTERM Grace before the lease's end,
// SIGKILL KillMargin before it, capped by a hold end; a round of extend attempts Period =
// (Lease - Grace) / 3 after the lease began, until the SIGTERM, so two attempts of a Period
// fit; CheckSchedule refuses flags where a Period is below MinAttempt. Keeper runs the rounds
// against an Extender (a client.Ticket) on an injected clock and reports each outcome as a
// Change: only a confirmed extension moves the stops later; an unknown outcome may move them
// earlier (the client counts min(old, new)); "not held" means SIGTERM now; a server without
// extend means the first lease's stops stand. Supervise owns the timers and the guard's
// deadline, and applies the changes from its one goroutine. While the command is stopped
// (Ctrl-Z, SIGSTOP; seen from the kernel's stop and continue events, on Linux) nothing is
// extended, so a command left stopped loses its lock at the end of the lease it has; at the
// SIGTERM the group also gets SIGCONT, to handle it.
//
// # The terminal
//
// When the terminal given as Spec.Terminal is latch's controlling terminal and latch's
// process group is its foreground group, the guard's group is made the foreground group
// (SysProcAttr.Foreground), so the command can read the terminal (an interactive psql, a
// confirmation prompt) instead of stopping on SIGTTIN. After the command, latch makes its own
// group the foreground again (with SIGTTOU ignored for that one call). Otherwise the command
// runs in the background group, as before.
//
// # Signals
//
// In the foreground, the terminal's SIGINT, SIGQUIT and SIGHUP reach the command's group,
// not latch. The guard, being in that group, gets them too and reports each one to latch over
// a second pipe. Signals sent to latch itself (SIGINT, SIGTERM, SIGHUP from kill or a service
// manager) are passed on to the group. The first such signal, either way, is the command's
// to handle; the second kills the group with SIGKILL at once instead of waiting for the
// lease. A signal latch passes on reaches the guard too and comes back as a report: latch
// counts those echoes and does not count them as a second signal.
package supervise
