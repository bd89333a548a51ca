package supervise

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest/procstat"
)

// liveLease is an Extender in real time: each Extend returns result(n) for the n-th call
// (nil: extended, the lease then ends lease after the call).
type liveLease struct {
	mu       sync.Mutex
	deadline time.Time
	lease    time.Duration
	result   func(n int) error
	calls    int
}

func newLiveLease(lease time.Duration, result func(int) error) *liveLease {
	return &liveLease{deadline: time.Now().Add(lease), lease: lease, result: result}
}

func (l *liveLease) CurrentDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *liveLease) Extend(ctx context.Context, lease time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	var err error
	if l.result != nil {
		err = l.result(l.calls)
	}
	if err == nil {
		l.deadline = time.Now().Add(lease)
	}
	return err
}

func (l *liveLease) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// events collects the notices of a Supervise.
type events struct {
	mu sync.Mutex
	ev []Event
}

func (e *events) notice(ev Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) count(k EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.ev {
		if ev.Kind == k {
			n++
		}
	}
	return n
}

// keptPlan is the plan of a lease l with grace, extended unless l is nil.
func keptPlan(l *liveLease, grace time.Duration, ev *events) Plan {
	p := Plan{Deadline: l.CurrentDeadline(), Schedule: Schedule{Lease: l.lease, Grace: grace}, Lease: l, Notice: ev.notice}
	return p
}

// A command that runs three times as long as its lease runs to its end while each extension
// is confirmed.
func TestSuperviseExtendsWhileTheCommandRuns(t *testing.T) {
	l := newLiveLease(4*time.Second, nil)
	ev := &events{}
	p := keptPlan(l, time.Second, ev)
	g := startSpec(t, Spec{KillAt: p.GuardKillAt()}, `sleep 9`)
	o := supervise(t, g, p)
	if o.State.ExitCode() != 0 || o.LeaseEnded || o.HoldEnded {
		t.Fatalf("outcome %+v (%v), want exit 0 past the first lease", o, o.State)
	}
	if n := ev.count(EventExtended); n < 5 {
		t.Fatalf("%d extensions in 9 s of a 4 s lease, want one a second", n)
	}
}

// An extend answered "not held" sends SIGTERM at once, long before the lease's end.
func TestSuperviseLostSendsTermNow(t *testing.T) {
	l := newLiveLease(10*time.Second, func(int) error { return client.ErrTicketLost })
	ev := &events{}
	p := keptPlan(l, time.Second, ev)
	mark := filepath.Join(t.TempDir(), "term")
	g := startSpec(t, Spec{KillAt: p.GuardKillAt()}, `trap 'echo term >> "$1"; exit 5' TERM; echo up >> "$1"; while :; do sleep 0.05; done`, mark)
	waitFile(t, mark)
	begin := time.Now()
	o := supervise(t, g, p)
	if !o.Lost || !o.LeaseEnded || o.State.ExitCode() != 5 || ev.count(EventLost) != 1 {
		t.Fatalf("outcome %+v (%v), events %+v, want SIGTERM on the lost lease", o, o.State, ev.ev)
	}
	if took := time.Since(begin); took > 8*time.Second || ev.count(EventTerm) != 0 {
		t.Fatalf("stopped %v after the start, events %+v: want at the first extension (3 s), before the lease's SIGTERM (9 s)", took, ev.ev)
	}
}

// A server that cannot extend leaves today's behaviour: one notice, and the command stopped
// at the end of the first lease.
func TestSuperviseUnsupportedStopsAtTheLeaseEnd(t *testing.T) {
	l := newLiveLease(1500*time.Millisecond, func(int) error { return client.ErrUnsupported })
	ev := &events{}
	p := keptPlan(l, 500*time.Millisecond, ev)
	g := startSpec(t, Spec{KillAt: p.GuardKillAt()}, `sleep 60`)
	o := supervise(t, g, p)
	if !o.LeaseEnded || ev.count(EventUnsupported) != 1 || l.count() != 1 {
		t.Fatalf("outcome %+v, %d extends, events %+v: want one refused extend, one notice, the lease's end", o, l.count(), ev.ev)
	}
}

// The hold cap stops a command whose lease is extended, as at a lease's end.
func TestSuperviseHoldCap(t *testing.T) {
	l := newLiveLease(3*time.Second, nil)
	ev := &events{}
	p := keptPlan(l, time.Second, ev)
	p.Schedule.HoldEnd = time.Now().Add(4 * time.Second)
	g := startSpec(t, Spec{KillAt: p.GuardKillAt()}, `sleep 60`)
	o := supervise(t, g, p)
	if !o.HoldEnded || o.LeaseEnded || ev.count(EventExtended) == 0 {
		t.Fatalf("outcome %+v, events %+v: want extended, then stopped at the cap", o, ev.ev)
	}
}

// A stopped command (SIGSTOP, as Ctrl-Z) is not extended: it gets SIGTERM (and SIGCONT, so it
// handles it) at the end of the lease it has.
func TestSuperviseNoExtensionWhileStopped(t *testing.T) {
	l := newLiveLease(3*time.Second, nil)
	ev := &events{}
	p := keptPlan(l, time.Second, ev)
	mark := filepath.Join(t.TempDir(), "term")
	g := startSpec(t, Spec{KillAt: p.GuardKillAt()}, `trap 'echo term >> "$1"; exit 5' TERM; echo up >> "$1"; while :; do sleep 0.05; done`, mark)
	waitFile(t, mark)
	res := make(chan Outcome, 1)
	go func() { res <- g.Supervise(p) }()
	for end := time.Now().Add(20 * time.Second); ev.count(EventExtended) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no extension within 20 s")
		}
	}
	pid := g.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	for end := time.Now().Add(10 * time.Second); procstat.State(pid) != 'T'; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the command is not stopped: state %c", procstat.State(pid))
		}
	}
	before := l.count()
	var o Outcome
	select {
	case o = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped command was not stopped at its lease end")
	}
	if n := l.count() - before; n > 1 {
		t.Fatalf("%d extensions while the command was stopped", n)
	}
	if !o.LeaseEnded || o.State.ExitCode() != 5 || ev.count(EventPaused) == 0 {
		t.Fatalf("outcome %+v (%v), events %+v: want Paused, then SIGTERM handled after SIGCONT", o, o.State, ev.ev)
	}
	if b, _ := os.ReadFile(mark); !strings.Contains(string(b), "term") {
		t.Fatalf("the command never handled SIGTERM: %q", b)
	}
}

// The guard kills the group at the kill deadline it was given, whether latch acts or not (a
// stopped or starved latch); latch can move that deadline.
func TestGuardKillsAtItsDeadline(t *testing.T) {
	g := startSpec(t, Spec{KillAt: time.Now().Add(time.Hour)}, `sleep 60`)
	if err := g.setKillAt(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	select {
	case <-g.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the guard did not kill the group at its deadline")
	}
	ws := g.State().Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || time.Since(begin) < 400*time.Millisecond {
		t.Fatalf("command ended with %v after %v, want SIGKILL at 500 ms", g.State(), time.Since(begin))
	}
}
