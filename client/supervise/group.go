package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// readyTimeout bounds how long Start waits for the guard to say it is ready.
const readyTimeout = 10 * time.Second

// Spec is a command to start. Path is what Resolve returned; Args[0] is the name as given.
type Spec struct {
	Path   string
	Args   []string
	Env    []string
	Stdin  *os.File
	Stdout io.Writer
	Stderr io.Writer
	// Terminal, if it is latch's controlling terminal and latch's group is its foreground
	// group, is given to the command's group while it runs (usually os.Stdin). Nil: never.
	Terminal *os.File
	// KillAt, if set, is when the guard kills the group by itself, latch alive or not; the
	// guard has it before the command starts. Supervise moves it with the lease.
	KillAt time.Time

	noCgroup bool // tests: start as where no cgroup can be made
}

// Group is a started command in its guarded process group.
type Group struct {
	cmd     *exec.Cmd
	guard   *exec.Cmd
	pgid    int
	ctl     *os.File            // the only write end of the guard's pipe
	reports chan syscall.Signal // terminal signals the guard saw
	done    chan struct{}       // closed once the command has exited (cmd.ProcessState is set)
	guarded chan struct{}       // closed once the guard has exited
	tty     int                 // the terminal's fd while the group has the foreground, else -1
	own     int                 // latch's process group, given the terminal back after

	ctlMu  sync.Mutex // serializes writes to ctl
	stops  stopWatch  // the command's stop and continue events (the Keeper's goroutine only)
	killAt time.Time  // the guard's kill deadline as last written (Supervise's goroutine only)

	cg          *cgroup // the command's cgroup; nil: none could be made (whyNoCgroup says why)
	whyNoCgroup error
	mark        string // without a cgroup, the variable that marks the command's environment

	// Set by Close: what it killed in the cgroup, what of that was still there at the end,
	// and, without a cgroup, the processes of the command that left the group and still run.
	outlived  []int
	undrained error
	escaped   []int

	closeOnce sync.Once
	echoed    atomic.Int64 // reports recognised as echoes of signals latch passed on (tests)
}

// Foreground reports whether the command's group has the terminal.
func (g *Group) Foreground() bool { return g.tty >= 0 }

// Pgid is the process group of the command (and of its guard).
func (g *Group) Pgid() int { return g.pgid }

// Done is closed when the command (the process Start started) has exited.
func (g *Group) Done() <-chan struct{} { return g.done }

// State is the command's exit state, once Done is closed.
func (g *Group) State() *os.ProcessState { return g.cmd.ProcessState }

// Signal sends sig to every process of the group, the guard included.
func (g *Group) Signal(sig syscall.Signal) error { return syscall.Kill(-g.pgid, sig) }

// kill sends SIGKILL to every process of the group and of the command's cgroup: the lease's
// end, or a second signal, reaches what left the group too. Close then waits for them.
func (g *Group) kill() {
	g.Signal(syscall.SIGKILL)
	if g.cg != nil {
		g.cg.killAll()
	}
}

// Start starts the guard, then the command in the guard's process group (see the package
// documentation). An error means nothing of the command runs.
func Start(s Spec) (*Group, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding latch's own binary for the guard: %w", err)
	}
	g := &Group{reports: make(chan syscall.Signal, 8), done: make(chan struct{}), guarded: make(chan struct{}), tty: -1, own: unix.Getpgrp()}
	if fd, ok := foregroundOf(s.Terminal); ok {
		g.tty = fd
	}
	if err := g.startGuard(self, s.Terminal); err != nil {
		return nil, err
	}
	if err := g.setKillAt(s.KillAt); err != nil {
		g.stopGuard()
		return nil, fmt.Errorf("giving the guard its kill deadline: %w", err)
	}
	cmd, err := g.startCommand(s)
	if err != nil {
		g.stopGuard()
		return nil, err
	}
	g.cmd, g.stops.pid = cmd, cmd.Process.Pid
	go func() {
		cmd.Wait()
		close(g.done)
	}()
	return g, nil
}

// startCommand starts the command in the guard's process group and, when one can be made, in
// a cgroup of its own from its first instruction on (see the package documentation). A start
// that fails in the cgroup is tried once more without it: a failed start ran nothing of the
// command, and clone3 or CLONE_INTO_CGROUP may be why (Linux before 5.7, a seccomp filter,
// a cgroup it may not enter).
func (g *Group) startCommand(s Spec) (*exec.Cmd, error) {
	g.cg, g.whyNoCgroup = nil, errors.New("none asked for")
	if !s.noCgroup {
		g.cg, g.whyNoCgroup = newCgroup(cgroupName(g.pgid))
	}
	cmd := g.command(s)
	err := cmd.Start()
	if err != nil && g.cg != nil {
		g.cg.drain()
		g.cg, g.whyNoCgroup = nil, fmt.Errorf("starting the command in cgroup: %w", err)
		cmd = g.command(s)
		err = cmd.Start()
	}
	return cmd, err
}

// command is the command of s to start: in the cgroup if there is one, else with the mark
// in its environment.
func (g *Group) command(s Spec) *exec.Cmd {
	cmd := &exec.Cmd{Path: s.Path, Args: s.Args, Env: s.Env, Stdout: s.Stdout, Stderr: s.Stderr}
	if s.Stdin != nil { // a nil *os.File in the io.Reader would not be nil
		cmd.Stdin = s.Stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: g.pgid}
	if g.cg != nil {
		g.cg.into(cmd.SysProcAttr)
	} else if g.mark = escapeMark(g.pgid); g.mark != "" {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env[:len(cmd.Env):len(cmd.Env)], g.mark)
	}
	return cmd
}

// setKillAt sets the guard's kill deadline to at (zero: none). An error means the guard is
// gone: latch's own timers still stop the command.
func (g *Group) setKillAt(at time.Time) error {
	g.ctlMu.Lock()
	defer g.ctlMu.Unlock()
	g.killAt = at
	_, err := g.ctl.Write(killMessage(at))
	return err
}

// startGuard starts the guard as the leader of a new group (the terminal's foreground group
// when g.tty is set) and waits for its ready byte.
func (g *Group) startGuard(self string, tty *os.File) error {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return err
	}
	restore := 0
	guard := exec.Command(self)
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if g.tty >= 0 {
		restore = g.own
		guard.Stdin = tty
		guard.SysProcAttr.Foreground, guard.SysProcAttr.Ctty = true, g.tty
	}
	guard.Env = []string{guardEnv + "=" + strconv.Itoa(restore)}
	guard.ExtraFiles = []*os.File{ctlR, repW}
	err = guard.Start()
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return fmt.Errorf("starting the guard process: %w", err)
	}
	g.guard, g.ctl, g.pgid = guard, ctlW, guard.Process.Pid
	go func() {
		guard.Wait()
		close(g.guarded)
	}()
	ready := make(chan error, 1)
	go g.readReports(repR, ready)
	select {
	case err = <-ready:
	case <-time.After(readyTimeout):
		err = fmt.Errorf("no answer within %s", readyTimeout)
	}
	if err != nil {
		g.stopGuard()
		return fmt.Errorf("starting the guard process: %w", err)
	}
	return nil
}

// readReports reads the guard's ready byte, then its signal reports, until the guard exits.
func (g *Group) readReports(r *os.File, ready chan<- error) {
	defer r.Close()
	b := make([]byte, 1)
	if _, err := io.ReadFull(r, b); err != nil || b[0] != readyByte {
		ready <- errors.New("the guard exited before it was ready")
		return
	}
	ready <- nil
	for {
		if _, err := r.Read(b); err != nil {
			return
		}
		if sig, ok := signalOf(b[0]); ok {
			select {
			case g.reports <- sig:
			default: // a burst of signals: the first ones already decide
			}
		}
	}
}

// stopGuard kills the group, gives the terminal back and reaps the guard.
func (g *Group) stopGuard() {
	g.Signal(syscall.SIGKILL)
	g.restoreTerminal()
	g.ctlMu.Lock()
	g.ctl.Close()
	g.ctlMu.Unlock()
	select {
	case <-g.guarded:
	case <-time.After(readyTimeout):
	}
}

// Close kills whatever is left of the command's cgroup and waits until it is empty (at most
// cgroupDrain), kills whatever is left of the group with SIGKILL, gives the terminal back to
// latch's group and reaps the guard; without a cgroup, it then looks for what the command
// started that left the group and still runs (Outcome.Escaped). Call it once the command has
// exited, or to end it at once.
func (g *Group) Close() {
	g.closeOnce.Do(func() {
		// The cgroup first: what is in it once the command has exited is what outlived it,
		// the group's leftovers included, and it all dies before the guard.
		if g.cg != nil {
			g.outlived, g.undrained = g.cg.drain()
		}
		g.stopGuard()
		<-g.done
		if g.cg == nil && g.mark != "" {
			g.escaped = escapees(g.mark, g.pgid)
		}
	})
}

// restoreTerminal makes latch's group the terminal's foreground group again. Latch is in a
// background group then, so SIGTTOU is ignored around the call (ignored, not caught: a
// caught SIGTTOU would stop latch's whole group). No child is started meanwhile, so none
// inherits the ignored disposition.
func (g *Group) restoreTerminal() {
	if g.tty < 0 {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(g.tty, unix.TIOCSPGRP, g.own)
	signal.Reset(syscall.SIGTTOU)
}

// foregroundOf returns t's descriptor if t is latch's controlling terminal and latch's
// process group is its foreground group.
func foregroundOf(t *os.File) (int, bool) {
	if t == nil {
		return -1, false
	}
	fd := int(t.Fd())
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pg != unix.Getpgrp() {
		return -1, false
	}
	return fd, true
}
