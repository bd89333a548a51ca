package supervise

import (
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// guardEnv marks a process as the guard; its value is the process group to give the
// terminal back to when latch dies (0: none).
const guardEnv = "LATCH_SUPERVISE_GUARD"

const readyByte = 'R'

// reported are the signals the guard passes on to latch, with their byte on the pipe.
var reported = map[syscall.Signal]byte{syscall.SIGINT: 'I', syscall.SIGQUIT: 'Q', syscall.SIGHUP: 'H'}

func signalOf(b byte) (syscall.Signal, bool) {
	for s, c := range reported {
		if c == b {
			return s, true
		}
	}
	return 0, false
}

// IsGuard reports whether this process was started as a guard. The binary's main calls it
// first and, if so, exits with GuardMain's status.
func IsGuard() bool {
	_, ok := os.LookupEnv(guardEnv)
	return ok
}

// GuardMain is the whole guard: it reports terminal signals on descriptor 4 and, when
// descriptor 3 reaches EOF (latch closed it or died), gives the terminal back and kills its
// own process group, itself included.
func GuardMain() int {
	restore, _ := strconv.Atoi(os.Getenv(guardEnv))
	ctl, rep := os.NewFile(3, "guard-ctl"), os.NewFile(4, "guard-reports")
	signal.Ignore(syscall.SIGTERM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, ctl)
		close(eof)
	}()
	rep.Write([]byte{readyByte})
	for {
		select {
		case s := <-sigs:
			rep.Write([]byte{reported[s.(syscall.Signal)]})
		case <-eof:
			if restore > 0 {
				// A member of the foreground group may set it without SIGTTOU.
				unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, restore)
			}
			syscall.Kill(0, syscall.SIGKILL)
			return 0
		}
	}
}
