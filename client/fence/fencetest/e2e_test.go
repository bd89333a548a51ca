package fencetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/client/fence"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/clustertest/procstat"
)

// The end-to-end test: a single-mode latch server and two `latch run` holders of one key on
// a 2 s lease, each running a writer (writer_test.go) that writes the report through the
// fence. The first holder writes once, then its whole process tree (latch run and the
// writer) is stopped with SIGSTOP, as a paused VM would be, past its lease. The second
// holder takes the lock and writes. The first one's writer is resumed and writes again
// with its old token: the database must refuse it and keep the second holder's write.
//
// latch run would SIGKILL its command at the end of the lease, had it been running; the
// pause stops it too, and the writer is resumed first, so the late write is tried every
// time (the point of fencing: the holder that missed its deadline is stopped by the
// resource, not by its own clock).

var latchBuild struct {
	once   sync.Once
	bin    string
	remove func()
	err    error
}

// latchBin builds latch from this repository, once per test process.
func latchBin(t *testing.T) string {
	t.Helper()
	latchBuild.once.Do(func() {
		latchBuild.bin, latchBuild.remove, latchBuild.err = clustertest.BuildLatch()
	})
	if latchBuild.err != nil {
		t.Fatal(latchBuild.err)
	}
	return latchBuild.bin
}

func removeLatch() {
	if latchBuild.remove != nil {
		latchBuild.remove()
	}
}

// rounds is how many times each database runs the race (FENCETEST_ROUNDS, default 3).
func rounds(t *testing.T) int {
	if s := os.Getenv("FENCETEST_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FENCETEST_ROUNDS=%q: want a positive number", s)
		}
		return n
	}
	return 3
}

func TestPausedHolderSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts latch processes and pauses one past its lease; skipped with -short")
	}
	addr := startLatch(t)
	for r := range rounds(t) {
		t.Run(fmt.Sprint("round", r), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence.db")
			s := newStore(t, openSQLite(t, path, "immediate"), fence.SQLite)
			racePausedHolder(t, addr, s, []string{dbEnv + "=sqlite", dsnEnv + "=" + sqliteDSN(path, "immediate")})
		})
	}
}

func TestPausedHolderPostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts latch processes and pauses one past its lease; skipped with -short")
	}
	srv := postgres(t)
	addr := startLatch(t)
	for r := range rounds(t) {
		t.Run(fmt.Sprint("round", r), func(t *testing.T) {
			db, dsn := srv.newDatabase(t)
			s := newStore(t, db, fence.PostgreSQL)
			racePausedHolder(t, addr, s, []string{dbEnv + "=postgresql", dsnEnv + "=" + dsn})
		})
	}
}

// startLatch runs a single-mode server on a loopback port picked by the kernel and returns
// its client address.
func startLatch(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(latchBin(t), "server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var logMu sync.Mutex
	listen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["@message"] == "latch serving" {
				addr, _ := line["listen"].(string)
				select {
				case listen <- addr:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			logMu.Lock()
			t.Logf("latch server log:\n%s", log.String())
			logMu.Unlock()
		}
	})
	select {
	case addr := <-listen:
		return addr
	case <-time.After(30 * time.Second):
		t.Fatal("latch server did not log 'latch serving' within 30 s")
	}
	return ""
}

// holder is one `latch run` process with its writer.
type holder struct {
	name string
	dir  string // the writer's files
	cmd  *exec.Cmd
	out  strings.Builder // latch run's and the writer's stdout and stderr
	done chan struct{}
}

// runHolder starts `latch run` of key on a 2 s lease with the writer as its command.
// latch run gets a process group of its own, so that signals to the test's group do not
// reach it.
func runHolder(t *testing.T, name, addr, key string, env []string) *holder {
	t.Helper()
	h := &holder{name: name, dir: t.TempDir(), done: make(chan struct{})}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.cmd = exec.Command(latchBin(t), "run", "--servers", addr, "--lease", "2s", "--kill-grace", "500ms",
		"--budget", "1s", "--wait", "30s", key, "--", self)
	h.cmd.Env = append(append(os.Environ(), writerEnv+"="+h.dir), env...)
	h.cmd.Stdout, h.cmd.Stderr = &syncWriter{b: &h.out}, &syncWriter{b: &h.out}
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.cmd.Wait(); close(h.done) }()
	t.Cleanup(func() {
		for _, pid := range procstat.Tree(h.cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-h.done
		if t.Failed() {
			t.Logf("%s (latch run and writer) said:\n%s", name, h.output())
		}
	})
	return h
}

var outMu sync.Mutex

type syncWriter struct{ b *strings.Builder }

func (w *syncWriter) Write(p []byte) (int, error) {
	outMu.Lock()
	defer outMu.Unlock()
	return w.b.Write(p)
}

func (h *holder) output() string {
	outMu.Lock()
	defer outMu.Unlock()
	return h.out.String()
}

// await waits for one of the writer's files and decodes it.
func (h *holder) await(t *testing.T, name string, v any) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(h.dir, name))
		if err == nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("%s: %s: %v", h.name, name, err)
			}
			return
		}
		select {
		case <-h.done:
			if b, err := os.ReadFile(filepath.Join(h.dir, name)); err == nil {
				json.Unmarshal(b, v)
				return
			}
			t.Fatalf("%s exited (%v) before its writer wrote %s", h.name, h.cmd.ProcessState, name)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within 60 s", h.name, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *holder) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit within 60 s", h.name)
	}
}
