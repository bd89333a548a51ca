package supervise

import (
	"errors"

	"golang.org/x/sys/unix"
)

// bootNanos is CLOCK_BOOTTIME in nanoseconds: one clock for latch and its guard that, unlike
// the monotonic clock, also counts time the machine was suspended (the server's lease ran on
// meanwhile), and that no wall-clock step moves.
func bootNanos() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("supervise: CLOCK_BOOTTIME: " + err.Error()) // present since Linux 2.6.39
	}
	return ts.Nano()
}

// si_code values of SIGCHLD (linux/include/uapi/asm-generic/siginfo.h); x/sys/unix has none.
const (
	cldStopped   = 5
	cldContinued = 6
)

// stopWatch follows whether a child process is stopped, from the stop and continue events
// the kernel reports to its parent (waitid WSTOPPED|WCONTINUED, without reaping: the exit
// stays for exec.Cmd.Wait). Only its one user calls it (the Keeper's goroutine).
type stopWatch struct {
	pid     int
	stopped bool
}

// Stopped drains the events reported since the last call and says whether the last one left
// the child stopped. A ptrace stop (a debugger's) does not count. Once the child is gone it
// reports false.
func (w *stopWatch) Stopped() bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, w.pid, &info, unix.WSTOPPED|unix.WCONTINUED|unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || info.Signo == 0 { // ECHILD: reaped; no Signo: nothing new
			if err != nil {
				w.stopped = false
			}
			return w.stopped
		}
		switch info.Code {
		case cldStopped:
			w.stopped = true
		case cldContinued:
			w.stopped = false
		}
	}
}
