package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest/procstat"
)

func TestAcquireReleasePing(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen

	code, out := run(t, nil, "ping", srv)
	if code != 0 || !strings.HasPrefix(out, "pong in ") {
		t.Fatalf("ping: exit %d, %q", code, out)
	}
	code, out = run(t, nil, "acquire", srv, "--lease", "30s", "--json", "job/a")
	if code != 0 {
		t.Fatalf("acquire: exit %d, %q", code, out)
	}
	var got struct {
		Key      string `json:"key"`
		Token    uint64 `json:"token"`
		Deadline string `json:"deadline"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Token != 1 || got.Key != "job/a" {
		t.Fatalf("acquire --json: %q (%v)", out, err)
	}
	dl, err := time.Parse(time.RFC3339Nano, got.Deadline)
	if err != nil || time.Until(dl) < 20*time.Second || time.Until(dl) > 31*time.Second {
		t.Fatalf("deadline %q: want about 30 s from now (%v)", got.Deadline, err)
	}

	code, out = run(t, nil, "acquire", srv, "--wait", "1s", "job/a")
	if code != exitNotAcquired || !strings.Contains(out, "not acquired") {
		t.Fatalf("acquire of a held lock: exit %d, %q", code, out)
	}
	code, out = run(t, []string{"LATCH_SERVERS=" + p.listen}, "release", "job/a", strconv.FormatUint(got.Token+1, 10))
	if code != exitNotHeld {
		t.Fatalf("release with a wrong token: exit %d, %q", code, out)
	}
	code, out = run(t, nil, "release", srv, "job/a", strconv.FormatUint(got.Token, 10))
	if code != 0 {
		t.Fatalf("release: exit %d, %q", code, out)
	}
	code, out = run(t, nil, "acquire", srv, "job/a")
	if code != 0 || !strings.HasPrefix(out, "token 2\ndeadline ") {
		t.Fatalf("acquire after release: exit %d, %q", code, out)
	}
}

func TestClientVerbsRefuseBadInput(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv := "--servers=" + p.listen
	for _, args := range [][]string{
		{"acquire", srv, "--lease", "3601s", "k"},
		{"acquire", srv, "--wait", "256s", "k"},
		{"acquire", srv, "--lease", "10s", "--budget", "11s", "k"},
		{"acquire", srv, "bad key"},
		{"acquire", srv, "cr\r"},
		{"acquire", srv},
		{"release", srv, "k", "not-a-number"},
		{"run", srv, "k"},
		{"run", srv, "--lease", "5s", "--kill-grace", "5s", "k", "--", "true"},
	} {
		if code, out := run(t, nil, args...); code != exitUsage {
			t.Errorf("latch %s: exit %d (%q), want %d", strings.Join(args, " "), code, out, exitUsage)
		}
	}
	code, out := run(t, nil, "acquire", "--servers=127.0.0.1:1", "--wait", "1s", "k")
	if code == 0 || code == exitUsage {
		t.Errorf("acquire with no server: exit %d, %q", code, out)
	}
}

func TestRunPassesLockAndStatus(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	code, out := run(t, nil, "run", "--servers="+p.listen, "--lease", "20s", "--kill-grace", "2s", "job/run", "--",
		"sh", "-c", `echo "$LATCH_KEY $LATCH_TOKEN $LATCH_DEADLINE" > "$1"; exit 7`, "sh", envFile)
	if code != 7 {
		t.Fatalf("run: exit %d, want the command's 7: %q", code, out)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 || f[0] != "job/run" || f[1] != "1" {
		t.Fatalf("command saw %q, want key job/run and token 1", b)
	}
	if _, err := time.Parse(time.RFC3339Nano, f[2]); err != nil {
		t.Fatalf("LATCH_DEADLINE %q: %v", f[2], err)
	}
	// The lock was released when the command exited.
	if code, out := run(t, nil, "acquire", "--servers="+p.listen, "job/run"); code != 0 || !strings.HasPrefix(out, "token 2") {
		t.Fatalf("acquire after run: exit %d, %q", code, out)
	}
}

func TestRunNeverStartsWithoutTheLock(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	if code, _ := run(t, nil, "acquire", "--servers="+p.listen, "--lease", "60s", "busy"); code != 0 {
		t.Fatal("could not take the lock")
	}
	marker := filepath.Join(t.TempDir(), "ran")
	code, out := run(t, nil, "run", "--servers="+p.listen, "--wait", "1s", "--lease", "20s", "busy", "--", "touch", marker)
	if code != exitNotAcquired {
		t.Fatalf("run on a held lock: exit %d (%q), want %d", code, out, exitNotAcquired)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the command ran without the lock")
	}
	code, _ = run(t, nil, "run", "--servers=127.0.0.1:1", "--wait", "1s", "--lease", "20s", "k", "--", "touch", marker)
	if code == 0 {
		t.Fatal("run without a server exited 0")
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the command ran without a server")
	}
}

// TestRunKillsBeforeLeaseEnds runs a command that ignores SIGTERM and keeps writing heartbeats,
// and a child of it that does the same; both must be dead before the lease deadline. Since
// latch run extends its lease (issue 21), --max-hold ends the hold before the first lease
// would have ended, so the stop comes as at that lease's end.
func TestRunKillsBeforeLeaseEnds(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	dir := t.TempDir()
	beats, pidFile := filepath.Join(dir, "beats"), filepath.Join(dir, "pid")
	script := `trap "" TERM
echo "$LATCH_DEADLINE" > "$1"
sh -c 'trap "" TERM; echo $$ > "$0"; exec sleep 60' "$2" &
while :; do date +%s%N >> "$1"; sleep 0.02; done`
	start := time.Now()
	code, out := run(t, nil, "run", "--servers="+p.listen, "--lease", "3s", "--kill-grace", "1s", "--max-hold", "2500ms", "job/long", "--",
		"sh", "-c", script, "sh", beats, pidFile)
	if code != exitKilled {
		t.Fatalf("run: exit %d (%q), want %d", code, out, exitKilled)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("run took %s with a 3 s lease", el)
	}
	b, err := os.ReadFile(beats)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) < 3 {
		t.Fatalf("too few heartbeats: %q", b)
	}
	deadline, err := time.Parse(time.RFC3339Nano, lines[0])
	if err != nil {
		t.Fatal(err)
	}
	lastNs, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if last := time.Unix(0, lastNs); !last.Before(deadline) {
		t.Fatalf("the command was still running at %s, after its lease deadline %s", last, deadline)
	}
	// Nothing writes after latch exited.
	time.Sleep(200 * time.Millisecond)
	if b2, _ := os.ReadFile(beats); len(b2) != len(b) {
		t.Fatal("the command kept running after latch run exited")
	}
	// The grandchild was in the command's process group and died with it.
	if pid := waitPid(t, pidFile); procstat.Alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d of the command's group outlived the lease", pid)
	}
}

func TestBenchReportsJSON(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	code, out := run(t, nil, "bench", "--servers="+p.listen, "--clients", "4", "--keys", "1",
		"--duration", "1s", "--warmup", "200ms", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d, %q", code, out)
	}
	var res struct {
		PairsPerS  float64            `json:"pairs_per_s"`
		Pairs      int64              `json:"pairs"`
		Inversions int64              `json:"fencing_inversions"`
		Acquire    map[string]float64 `json:"acquire_ms"`
		Errors     map[string]int64   `json:"errors"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
		t.Fatalf("bench output %q: %v", out, err)
	}
	if res.Pairs == 0 || res.PairsPerS <= 0 || res.Inversions != 0 || res.Acquire["p50"] <= 0 || len(res.Errors) != 0 {
		t.Fatalf("bench result %+v", res)
	}
}
