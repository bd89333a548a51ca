package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire/wiretest"
)

// These tests run the real binary, built once by TestMain, as a separate process on
// loopback, and talk to it over TCP and HTTP like a user would.

var latchBin string

const testVersion = "v0.0.0-test"

// testRevision and testDate are what the test binary's build says of itself (buildinfo).
const (
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testDate     = "2026-12-01T10:00:00Z"
)

// stampFlags are the -ldflags -X settings that give a build version, revision and date
// (cluster/buildinfo). A build of a revision from before that package reads main.version,
// which is set too: the linker ignores the settings of variables a build does not have.
func stampFlags(version, revision, date string) string {
	const pkg = "github.com/latchd/latch/cluster/buildinfo"
	return fmt.Sprintf("-X main.version=%s -X %s.version=%s -X %s.revision=%s -X %s.date=%s", version, pkg, version, pkg, revision, pkg, date)
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(floodEnv); spec != "" { // this process is a flood (flood_test.go)
		os.Exit(floodMain(spec))
	}
	if spec := os.Getenv(chaosEnv); spec != "" { // this process runs a chaos lab (chaos_run_test.go)
		os.Exit(chaosMain(spec))
	}
	os.Exit(clustertest.RunWithLatch(m, &latchBin, "-ldflags", stampFlags(testVersion, testRevision, testDate)))
}

// proc is a running latch server process.
type proc struct {
	cmd    *exec.Cmd
	stderr *clustertest.Buffer
	exited chan struct{}
	err    error // Wait's result, once exited is closed
	listen string
	http   string

	what    string
	serving chan map[string]any // the "latch serving" log line, once
	served  map[string]any      // that line, once awaitServing has taken it
}

// startServer runs `latch server` with args (JSON logs, ports picked by the kernel unless
// args or env set them) and waits until it logs that it serves.
func startServer(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := spawnServer(t, env, args...)
	p.awaitServing(t)
	return p
}

// spawnServer starts `latch server` as startServer does, without waiting: nodes that wait
// for each other (an initial cluster) are all spawned first, then awaited.
func spawnServer(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return spawnServerOf(t, "", env, args...)
}

// startServerOf is startServer with the binary bin: "" is this build (latchBin), another
// path another build (prevLatch's, for a cluster of two builds).
func startServerOf(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := spawnServerOf(t, bin, env, args...)
	p.awaitServing(t)
	return p
}

// spawnServerOf is spawnServer with the binary bin ("" is latchBin). Another build gets the
// same flags, each checked first to be one that build has (checkServerFlags).
func spawnServerOf(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	full := append([]string{"server", "--log-format", "json"}, args...)
	if !hasFlag(args, env, "listen") {
		full = append(full, "--listen", "127.0.0.1:0")
	}
	if !hasFlag(args, env, "http") {
		full = append(full, "--http", "127.0.0.1:0")
	}
	if bin == "" {
		bin = latchBin
	} else if bin != latchBin {
		checkServerFlags(t, bin, full[1:])
	}
	cmd := exec.Command(bin, full...)
	cmd.Env = append(os.Environ(), env...)
	return spawn(t, cmd, "server")
}

// spawn starts cmd (a latch server) and kills it when the test ends (printing its log if
// the test failed). awaitServing then waits until it logs that it serves.
func spawn(t *testing.T, cmd *exec.Cmd, what string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, stderr: &clustertest.Buffer{}, exited: make(chan struct{}), what: what, serving: make(chan map[string]any, 1)}
	pr, pw := io.Pipe()
	p.cmd.Stderr = io.MultiWriter(p.stderr, pw)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("log of %s:\n%s", what, p.stderr.String())
		}
	})
	go scanServing(pr, nil, p.serving)
	return p
}

// scanServing reads a server's JSON log lines from r to its end, copies each to w unless w
// is nil, and sends the first "latch serving" line to serving (buffered: it never blocks).
func scanServing(r io.Reader, w io.Writer, serving chan<- map[string]any) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		if w != nil {
			w.Write(append(sc.Bytes(), '\n'))
		}
		var line map[string]any
		if !found && json.Unmarshal(sc.Bytes(), &line) == nil && line["@message"] == "latch serving" {
			found = true
			serving <- line
		}
	}
	io.Copy(io.Discard, r) // keep the writer from blocking after a scan error
}

// awaitServing waits until the process logs that it serves and notes its client and HTTP
// addresses.
func (p *proc) awaitServing(t *testing.T) {
	t.Helper()
	select {
	case line := <-p.serving:
		p.served = line
		p.listen, _ = line["listen"].(string)
		p.http, _ = line["http"].(string)
		if on, _ := line["http_tls"].(bool); on {
			p.http = "https://" + p.http
		}
	case <-p.exited:
		t.Fatalf("%s exited before serving: %v\n%s", p.what, p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not log 'latch serving' within 30 s:\n%s", p.what, p.stderr.String())
	}
}

// dial connects a client to p's client port and says hello without a secret; the
// connection is closed when the test ends.
func (p *proc) dial(t *testing.T) *wiretest.Conn {
	t.Helper()
	c := wiretest.Dial(t, p.listen)
	c.Hello(t, nil)
	return c
}

func hasFlag(args, env []string, name string) bool {
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	envName := "LATCH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "="
	for _, e := range env {
		if strings.HasPrefix(e, envName) {
			return true
		}
	}
	return false
}

// wait waits for the process to exit within d and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("server still running after %s", d)
	}
	return waitStatus(t, p.err)
}

// waitStatus is the exit code of a process whose Wait returned err: 0, its status, or -1 when
// a signal ended it. An error that is no exit status fails the test.
func waitStatus(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", err)
	return -1
}

// exitWithin waits up to d for the process whose Wait result done delivers (see start) and
// returns its exit code; it fails the test when the process, named by what, still runs
// after d, printing its output out.
func exitWithin(t *testing.T, done <-chan error, d time.Duration, what string, out *clustertest.Buffer) int {
	t.Helper()
	select {
	case err := <-done:
		return waitStatus(t, err)
	case <-time.After(d):
		t.Fatalf("%s still running after %s:\n%s", what, d, out.String())
	}
	return -1
}

// start runs the binary in the background: done gets Wait's result, out collects stdout and
// stderr. The process is killed when the test ends.
func start(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, out *clustertest.Buffer, done <-chan error) {
	t.Helper()
	cmd = exec.Command(latchBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out = &clustertest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, out, ch
}

// run runs the binary to completion with a bound and returns its exit code and output.
func run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	_, out, done := start(t, env, args...)
	code := exitWithin(t, done, 20*time.Second, "latch "+strings.Join(args, " "), out)
	return code, out.String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// httpGetQuiet is an HTTP GET that reports failure as status 0, for polling. hostPath may
// start with https:// (a node with --http-tls); the certificate is not checked here, only by
// the tests that are about it.
func httpGetQuiet(hostPath string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + hostPath
	if strings.HasPrefix(hostPath, "https://") {
		url = hostPath
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// waitPid waits up to 20 s for path to hold a pid and returns it.
func waitPid(t *testing.T, path string) int {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("%s: %q", path, b)
			}
			return pid
		}
	}
	t.Fatalf("%s was not written within 20 s", path)
	return 0
}

// logTimes are the timestamps of p's JSON log lines whose message starts with msg, in the
// order logged; it fails the test when there is none.
func (p *proc) logTimes(t *testing.T, msg string) []time.Time {
	t.Helper()
	var at []time.Time
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var l struct {
			Msg string    `json:"@message"`
			At  time.Time `json:"@timestamp"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, msg) {
			at = append(at, l.At)
		}
	}
	if len(at) == 0 {
		t.Fatalf("%s never logged %q:\n%s", p.what, msg, p.stderr.String())
	}
	return at
}

// logTime is the timestamp of the first log line of p whose message starts with msg.
func logTime(t *testing.T, p *proc, msg string) time.Time {
	t.Helper()
	return p.logTimes(t, msg)[0]
}

// lastLogTime is the timestamp of the last log line of p whose message starts with msg.
func lastLogTime(t *testing.T, p *proc, msg string) time.Time {
	t.Helper()
	at := p.logTimes(t, msg)
	return at[len(at)-1]
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// stop sends p SIGTERM and fails unless it exits 0 within 30 s; name says which process it
// is in the failure.
func (p *proc) stop(t *testing.T, name string) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("%s: exit %d after SIGTERM", name, code)
	}
}

// kill sends p SIGKILL and waits until it has exited (its sockets are closed by then).
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.wait(t, 30*time.Second)
}

// freeze stops p (SIGSTOP) and returns the func that resumes it (SIGCONT), at once when
// called and at the latest when the test ends: no frozen process outlives its test.
func (p *proc) freeze(t *testing.T) (resume func()) {
	t.Helper()
	p.signal(t, syscall.SIGSTOP)
	var once sync.Once
	resume = func() { once.Do(func() { p.cmd.Process.Signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}
