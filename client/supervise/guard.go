package supervise

import (
	"encoding/binary"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guardEnv marks a process as the guard; its value is the process group to give the
// terminal back to when latch dies (0: none).
const guardEnv = "LATCH_SUPERVISE_GUARD"

const readyByte = 'R'

// On the control pipe latch writes kill deadlines: killByte, then the deadline as a big-endian
// int64 of bootNanos (0: none). Nine bytes are below PIPE_BUF, so each write is whole.
const (
	killByte = 'K'
	killLen  = 9
)

// guardNap is the longest the guard sleeps before it looks at the clock again: its timer runs
// on the monotonic clock, which stops while the machine is suspended, and bootNanos does not.
const guardNap = time.Second

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

// killMessage is the control message that sets the guard's kill deadline to at (zero: none).
func killMessage(at time.Time) []byte {
	var abs int64
	if !at.IsZero() {
		abs = bootNanos() + int64(time.Until(at))
	}
	return binary.BigEndian.AppendUint64([]byte{killByte}, uint64(abs))
}

// IsGuard reports whether this process was started as a guard. The binary's main calls it
// first and, if so, exits with GuardMain's status.
func IsGuard() bool {
	_, ok := os.LookupEnv(guardEnv)
	return ok
}

// GuardMain is the whole guard: it reports terminal signals on descriptor 4, and gives the
// terminal back and kills the command's cgroup (when latch made one) and its own process
// group, itself included, when descriptor 3 reaches EOF (latch closed it or died) or when the
// kill deadline latch last wrote on it passes, whether or not latch still runs (stopped,
// starved or slow).
func GuardMain() int {
	restore, _ := strconv.Atoi(os.Getenv(guardEnv))
	// The command's cgroup, if latch makes one: found now, while the guard is in latch's.
	cg, _ := commandCgroup(os.Getpid())
	ctl, rep := os.NewFile(3, "guard-ctl"), os.NewFile(4, "guard-reports")
	signal.Ignore(syscall.SIGTERM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	eof := make(chan struct{})
	deadlines := make(chan int64, 1)
	go readControl(ctl, deadlines, eof)
	rep.Write([]byte{readyByte})
	nap := time.NewTimer(time.Hour)
	nap.Stop()
	var deadline int64 // bootNanos; 0: none
	for {
		select {
		case s := <-sigs:
			rep.Write([]byte{reported[s.(syscall.Signal)]})
			continue
		case deadline = <-deadlines:
		case <-nap.C:
		case <-eof:
			killGroup(restore, cg)
			return 0
		}
		nap.Stop()
		if deadline == 0 {
			continue
		}
		left := time.Duration(deadline - bootNanos())
		if left <= 0 {
			killGroup(restore, cg)
			return 0
		}
		nap.Reset(min(left, guardNap))
	}
}

// readControl reads kill deadlines from ctl, keeping only the latest in deadlines, and closes
// eof at its end or at anything it cannot read.
func readControl(ctl io.Reader, deadlines chan int64, eof chan<- struct{}) {
	defer close(eof)
	msg := make([]byte, killLen)
	for {
		if _, err := io.ReadFull(ctl, msg); err != nil || msg[0] != killByte {
			return
		}
		d := int64(binary.BigEndian.Uint64(msg[1:]))
		select {
		case <-deadlines: // the guard has not taken the older one: this one replaces it
		default:
		}
		deadlines <- d
	}
}

// killGroup gives the terminal back to restore (0: none), kills the command's cgroup cg (nil,
// or not made: none) and waits until it is empty, and kills the guard's group.
func killGroup(restore int, cg *cgroup) {
	if restore > 0 {
		// A member of the foreground group may set it without SIGTTOU.
		unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, restore)
	}
	if cg != nil {
		cg.drain()
	}
	syscall.Kill(0, syscall.SIGKILL)
}
