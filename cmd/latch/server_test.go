package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

func TestServerServesProtocolAndHTTP(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	c := p.dial(t)
	tok := c.Do(t, wiretest.Acquire(1, 0, 30, "job/nightly")).Token
	if tok != 1 {
		t.Fatalf("first token %d, want 1", tok)
	}
	c.Raw(t, wiretest.Acquire(2, 0, 30, "job/nightly"))
	c.ExpectOp(t, wire.OpTimeout, 2)

	if code, body := httpGet(t, "http://"+p.http+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+p.http+"/readyz"); code != 200 || !strings.Contains(body, "ready") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	code, body := httpGet(t, "http://"+p.http+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`latch_acquires_total{result="acquired"} 1`,
		`latch_acquires_total{result="timeout"} 1`,
		`latch_keys 1`,
		`latch_last_token 1`,
		`latch_connections 1`,
		`latch_grant_latency_seconds_count 1`,
		`latch_admission_gate_closed{gate="waiters"} 0`,
		`latch_frame_errors_total{reason="bad_key"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	c.Raw(t, wiretest.Release(3, tok, "job/nightly"))
	c.ExpectOp(t, wire.OpRelease, 3)
}

func TestEnvironmentSetsFlags(t *testing.T) {
	t.Parallel()
	p := startServer(t, []string{"LATCH_MAX_KEYS=10", "LATCH_TOKEN_FLOOR=100", "LATCH_LISTEN=127.0.0.1:0", "LATCH_LOG_LEVEL=debug"})
	c := p.dial(t)
	for i := range 9 {
		tok := c.Do(t, wiretest.Acquire(uint64(i+1), 0, 30, "k"+string(rune('a'+i)))).Token
		if tok != uint64(101+i) {
			t.Fatalf("grant %d: token %d, want %d (floor 100 from LATCH_TOKEN_FLOOR)", i, tok, 101+i)
		}
	}
	// 9 of 10 keys (LATCH_MAX_KEYS=10) closes the keys gate.
	c.Raw(t, wiretest.Acquire(50, 0, 30, "new"))
	c.ExpectOp(t, wire.OpBusy, 50)
	// The connection's debug line is written by the server's own goroutine: poll for it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), `"@level":"debug"`); {
		if time.Now().After(deadline) {
			t.Fatalf("LATCH_LOG_LEVEL=debug did not enable debug lines:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTokenFloorAtTheTop(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil, "--token-floor", "9223372036854775805")
	c := p.dial(t)
	a := c.Do(t, wiretest.Acquire(1, 0, 30, "a")).Token
	b := c.Do(t, wiretest.Acquire(2, 0, 30, "b")).Token
	if a != 9223372036854775806 || b != 9223372036854775807 {
		t.Fatalf("tokens %d, %d; want 9223372036854775806, 9223372036854775807", a, b)
	}
	for i, key := range []string{"c", "a", "d"} {
		c.Raw(t, wiretest.Acquire(uint64(10+i), 3, 30, key))
		c.ExpectError(t, uint64(10+i), wire.ReasonTokenExhausted)
	}
	c.Raw(t, wiretest.Release(20, a, "a"))
	c.ExpectOp(t, wire.OpRelease, 20)
	c.Raw(t, wiretest.Acquire(21, 0, 30, "a"))
	c.ExpectError(t, 21, wire.ReasonTokenExhausted)
	c.Alive(t, 22)
}

func TestSecretFile(t *testing.T) {
	t.Parallel()
	old := strings.Repeat("o", 32)
	cur := "a-much-longer-secret-that-is-the-current-one-0123456789"
	file := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(file, []byte(old+"\r\n\n"+cur+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServer(t, nil, "--secret-file", file)
	for _, s := range []string{old, cur} {
		c := wiretest.Dial(t, p.listen)
		c.Hello(t, []byte(s)) // verifies the server's proof too
		c.Alive(t, 1)
	}
	c := wiretest.Dial(t, p.listen)
	c.Raw(t, wiretest.Acquire(7, 0, 30, "k"))
	c.ExpectErrorAndClose(t, 7, wire.ReasonAuthRequired)

	c = wiretest.Dial(t, p.listen)
	nonce, _ := wire.NewNonce()
	c.Raw(t, wiretest.Hello(1, 0, nonce))
	h := c.Next(t)
	if h.Op != wire.OpHello || h.Hello.Flags&wire.FlagAuthRequired == 0 {
		t.Fatalf("hello %+v: want auth required", h)
	}
	c.Raw(t, wiretest.Proof(wire.ClientProof([]byte(strings.Repeat("x", 32)), nonce, h.Hello.Nonce)))
	c.ExpectErrorAndClose(t, 0, wire.ReasonAuthFailed)
	if strings.Contains(p.stderr.String(), cur) || strings.Contains(p.stderr.String(), old) {
		t.Fatal("a secret appears in the log")
	}
}

func TestBadSecretFileRefused(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(file, []byte(strings.Repeat("s", 40)+"\ntiny-secret-xyz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := run(t, nil, "server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--secret-file", file)
	if code == 0 || !strings.Contains(out, "line 2") || strings.Contains(out, "tiny-secret-xyz") {
		t.Fatalf("exit %d, output %q: want a failure naming line 2 without the secret", code, out)
	}
	code, out = run(t, nil, "server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--secret-file", file+".missing")
	if code == 0 || !strings.Contains(out, "secret-file") {
		t.Fatalf("missing file: exit %d, %q", code, out)
	}
}

func TestRefusesPublicListenWithoutSecret(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		code, out := run(t, nil, "server", "--listen", addr, "--http", "127.0.0.1:0")
		if code == 0 || !strings.Contains(out, "--secret-file") || !strings.Contains(out, "--insecure") {
			t.Errorf("--listen %s: exit %d, output %q: want a refusal naming --secret-file and --insecure", addr, code, out)
		}
	}
}

func TestBadFlagsSayWhatToDo(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "xml"}, "use text or json"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--max-keys", "0"}, "--max-keys"},
		{[]string{"--max-conns", "0"}, "--max-conns"},
		{[]string{"--token-floor", "9223372036854775808"}, "9223372036854775807"},
		{[]string{"--mode", "raft"}, "use single or cluster"},
		{[]string{"--mode", "cluster"}, "--id and --data-dir"},
		{[]string{"--mode", "cluster", "--id", "n1", "--data-dir", "/tmp/x", "--bootstrap", "--initial-cluster", "n1=127.0.0.1:1"}, "--bootstrap excludes"},
		{[]string{"--mode", "cluster", "--id", "n1", "--data-dir", "/tmp/x", "--bootstrap", "--join", "127.0.0.1:1"}, "--bootstrap excludes"},
		{[]string{"--mode", "cluster", "--id", "n9", "--data-dir", "/tmp/x", "--initial-cluster", "n1=127.0.0.1:1"}, "is not in --initial-cluster"},
		{[]string{"--mode", "cluster", "--id", "n1", "--data-dir", "/tmp/x", "--initial-cluster", "n1=127.0.0.1:1", "--advertise", "127.0.0.1:2"}, "use the same address"},
		{[]string{"--mode", "cluster", "--id", "n1", "--data-dir", "/tmp/x", "--initial-cluster", "n1"}, "ID=ADDR"},
		{[]string{"--mode", "cluster", "--id", "n1", "--data-dir", "/tmp/x", "--bootstrap", "--raft-addr", "0.0.0.0:0"}, "--raft-addr"},
		{[]string{"--mode", "cluster", "--id", "n1", "--data-dir", "/tmp/x", "--bootstrap", "--http", "0.0.0.0:0"}, "--http 0.0.0.0:0: refusing a non-loopback admin address"},
		{[]string{"extra-arg"}, "no arguments"},
	}
	for _, c := range cases {
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, c.args...)
		code, out := run(t, nil, args...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("latch %s: exit %d, output %q; want failure mentioning %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
}

func TestSIGTERMDrainsAndExitsZero(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	holder := p.dial(t)
	holder.Do(t, wiretest.Acquire(1, 0, 60, "k"))
	waiter := p.dial(t)
	waiter.Raw(t, wiretest.Acquire(42, 60, 30, "k"))
	waiter.ExpectSilent(t, 200*time.Millisecond) // queued behind the holder

	p.signal(t, syscall.SIGTERM)
	waiter.ExpectErrorAndClose(t, 42, wire.ReasonUnavailable)
	holder.ExpectClosed(t)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "latch stopped") {
		t.Fatalf("no 'latch stopped' line:\n%s", p.stderr.String())
	}
	if c, err := wiretest.DialErr(p.listen); err == nil {
		c.Close()
		t.Fatal("still accepting after exit")
	}
}

func TestLogsAreJSONLines(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil, "--log-level", "debug")
	c := wiretest.Dial(t, p.listen)
	c.Raw(t, []byte("Z\n")) // not a frame: the connection is closed with a logged reason
	c.ExpectErrorAndClose(t, 0, wire.ReasonBadRequest)
	p.signal(t, syscall.SIGTERM)
	p.wait(t, 20*time.Second)
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("want several log lines, got %q", lines)
	}
	var sawReason bool
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["reason"] == "bad_request" {
			sawReason = true
		}
	}
	if !sawReason {
		t.Errorf("no log line carries reason=bad_request:\n%s", p.stderr.String())
	}
}

// latch version and latch --version print the build the linker stamped (buildinfo), and
// --json the same as /v1/status's "build".
func TestVersion(t *testing.T) {
	t.Parallel()
	want := fmt.Sprintf("latch %s\nrevision  %s\nbuilt     %s\ngo        %s\n", testVersion, testRevision, testDate, runtime.Version())
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out := run(t, nil, args...); code != 0 || out != want {
			t.Errorf("latch %s: exit %d, %q, want %q", args[0], code, out, want)
		}
	}
	code, out := run(t, nil, "version", "--json")
	wantJSON := fmt.Sprintf(`{"version":%q,"revision":%q,"date":%q,"go":%q}`+"\n", testVersion, testRevision, testDate, runtime.Version())
	if code != 0 || out != wantJSON {
		t.Errorf("latch version --json: exit %d, %q, want %q", code, out, wantJSON)
	}
}
