package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// TestSignedCallsReplayNowhere captures a signed backup download, membership change and
// restore made through one follower, and replays each, byte for byte: on the same node
// (refused: used), on every other member (refused: signed for another node) and on the
// same node after it restarted (refused: signed for another run). A lock granted after the
// restore survives every replayed restore, and a member removed after the add is not
// brought back.
func TestSignedCallsReplayNowhere(t *testing.T) {
	clustertest.Slow(t, "starts three processes and restarts one")
	sec := newTestSecrets(t)
	tc := startTestCluster(t, 3, sec.serverArgs()...)
	l := tc.leader()
	a := (l + 1) % 3 // the follower that verifies the calls, then forwards them to the leader
	others := []int{l, (l + 2) % 3}
	key := []byte(adminSecretValue)
	c := wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, []byte(clientSecretValue))
	if r := c.Do(t, wiretest.Acquire(1, 0, 600, "replay/in-backup")); r.Op != wire.OpAcquire {
		t.Fatalf("acquire: %s", wiretest.Describe(r))
	}
	c.Close()

	backupCall := signCall(t, tc.procs[a].http, key, http.MethodGet, "/v1/snapshot", nil)
	code, backup := backupCall.send(t, tc.procs[a].http)
	if code != 200 || !bytes.HasPrefix(backup, []byte("LATCH")) {
		t.Fatalf("backup through n%d: %d %.200s", a+1, code, backup)
	}
	n9 := clustertest.FreePorts(t, 1)[0]
	addCall := signCall(t, tc.procs[a].http, key, http.MethodPost, "/v1/peers", []byte(`{"id":"n9","addr":"`+n9+`","nonvoter":true}`))
	if code, body := addCall.send(t, tc.procs[a].http); code != 200 {
		t.Fatalf("adding n9 through n%d: %d %s", a+1, code, body)
	}
	restoreCall := signCall(t, tc.procs[a].http, key, http.MethodPost, "/v1/restore?token_floor=0", backup)
	if code, body := restoreCall.send(t, tc.procs[a].http); code != 200 {
		t.Fatalf("restore through n%d: %d %s", a+1, code, body)
	}
	tc.leader()
	if code, out := run(t, nil, "peers", "remove", "--http", tc.procs[a].http, "--admin-secret-file", sec.admin, "--id", "n9"); code != 0 {
		t.Fatalf("removing n9: exit %d, %q", code, out)
	}
	// A lock granted after the restore: a replayed restore would wipe it.
	l = tc.leader()
	c = wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, []byte(clientSecretValue))
	after := c.Do(t, wiretest.Acquire(2, 0, 600, "replay/after-restore"))
	if after.Op != wire.OpAcquire {
		t.Fatalf("acquire after the restore: %s", wiretest.Describe(after))
	}
	c.Close()

	calls := map[string]capturedCall{"backup download": backupCall, "membership change": addCall, "restore": restoreCall}
	replay := func(to int, want ...string) {
		t.Helper()
		for what, call := range calls {
			code, body := call.send(t, tc.procs[to].http)
			var e struct{ Error string }
			json.Unmarshal(body, &e)
			ok := code == 401
			for _, w := range want {
				ok = ok && strings.Contains(e.Error, w)
			}
			if !ok {
				t.Errorf("%s made for n%d, replayed on n%d: %d %s; want 401 saying %q", what, a+1, to+1, code, body, want)
			}
		}
	}
	node := func(i int) string { return strconv.Quote(fmt.Sprintf("n%d", i+1)) }
	replay(a, "already used")
	for _, o := range others {
		replay(o, "signed for node "+node(a), "this is node "+node(o))
	}
	tc.procs[a].stop(t, fmt.Sprintf("n%d", a+1))
	tc.procs[a] = startServer(t, nil, tc.args[a]...)
	l = tc.leader()
	replay(a, "signed for node "+node(a), "this is node "+node(a)) // another boot id

	c = wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, []byte(clientSecretValue))
	c.Raw(t, wiretest.Acquire(3, 0, 30, "replay/after-restore"))
	c.ExpectOp(t, wire.OpTimeout, 3)
	if _, out := run(t, nil, "peers", "list", "--http", tc.procs[l].http); strings.Contains(out, "n9") {
		t.Fatalf("a replayed add brought n9 back:\n%s", out)
	}
}

// vmHWM is the peak resident set size of process pid, in bytes (/proc/PID/status).
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := readVmHWM(pid)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readVmHWM reads VmHWM, the peak resident set size, of process pid from /proc, in bytes.
func readVmHWM(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// streamRestore sends call's headers to httpAddr announcing size bytes of body, then writes
// the body from a generator (never held in memory) while waiting for the answer. It returns
// the status, the answer's body and how many body bytes the server let it write.
func streamRestore(t *testing.T, httpAddr string, call capturedCall, size int64) (int, string, int64) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", httpAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n", call.method, call.path, httpAddr, size)
	for k, vs := range call.header {
		for _, v := range vs {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v)
		}
	}
	head.WriteString("\r\n")
	if _, err := nc.Write([]byte(head.String())); err != nil {
		t.Fatal(err)
	}
	written := make(chan int64, 1)
	go func() {
		chunk := bytes.Repeat([]byte("LATCHSNP"), 8<<10) // 64 KiB
		var n int64
		for n < size {
			nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			k, err := nc.Write(chunk[:min(int64(len(chunk)), size-n)])
			n += int64(k)
			if err != nil {
				break
			}
		}
		written <- n
	}()
	nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("no answer to the restore: %v", err)
	}
	var body strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&body)
	resp.Body.Close()
	nc.Close() // the server has answered: stop writing
	return resp.StatusCode, body.String(), <-written
}

// TestRestoreBodyReadOnlyWhenSigned: a restore whose signature is well formed but wrong (the
// client secret), or absent, announcing and streaming 200 MB, is refused from its headers
// alone: the server reads almost none of it, its peak RSS stays far below the body's size,
// and a correctly signed restore succeeds right after. A correctly signed call whose body is
// not the one it signed is refused and applies nothing.
func TestRestoreBodyReadOnlyWhenSigned(t *testing.T) {
	clustertest.Slow(t, "streams 400 MB to a server")
	sec := newTestSecrets(t)
	p := startServer(t, nil, append([]string{"--mode", "cluster", "--id", "n1", "--data-dir", t.TempDir(),
		"--raft-addr", clustertest.FreePorts(t, 1)[0], "--bootstrap"}, sec.serverArgs()...)...)
	(&testCluster{t: t, procs: []*proc{p}}).leader()
	c := wiretest.Dial(t, p.listen)
	c.Hello(t, []byte(clientSecretValue))
	if r := c.Do(t, wiretest.Acquire(1, 0, 600, "restore/held")); r.Op != wire.OpAcquire {
		t.Fatalf("acquire: %s", wiretest.Describe(r))
	}
	backup := filepath.Join(t.TempDir(), "backup.snap")
	if code, out := run(t, nil, "snapshot", "save", "--http", p.http, "--admin-secret-file", sec.admin, backup); code != 0 {
		t.Fatalf("snapshot save: exit %d, %q", code, out)
	}

	const size = 200 << 20
	pid := p.cmd.Process.Pid
	before := vmHWM(t, pid)
	for _, call := range []capturedCall{
		signCall(t, p.http, []byte(clientSecretValue), http.MethodPost, "/v1/restore?token_floor=0", nil),
		{method: http.MethodPost, path: "/v1/restore?token_floor=0", header: http.Header{}},
	} {
		code, body, written := streamRestore(t, p.http, call, size)
		if code != 401 || !strings.Contains(body, "--admin-secret-file") || written >= size {
			t.Fatalf("restore with a bad or no signature: %d %q after %d of %d body bytes; want 401 naming --admin-secret-file, the body unread", code, body, written, size)
		}
		t.Logf("refused after %d MB written (socket buffers)", written>>20)
	}
	peak := vmHWM(t, pid)
	t.Logf("server peak RSS %d MB before, %d MB after two refused 200 MB restores", before>>20, peak>>20)
	if peak-before > 64<<20 {
		t.Fatalf("the server's peak RSS grew by %d MB for restores it refused", (peak-before)>>20)
	}

	// A signed call for one body, sent with another of the same size: refused, not applied.
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	other := bytes.Clone(data)
	other[len(other)-1] ^= 1
	swapped := signCall(t, p.http, []byte(adminSecretValue), http.MethodPost, "/v1/restore?token_floor=0", data)
	swapped.body = other
	if code, body := swapped.send(t, p.http); code != 400 || !strings.Contains(string(body), "nothing was applied") {
		t.Fatalf("a restore whose body is not the one signed: %d %s", code, body)
	}
	c.Raw(t, wiretest.Release(2, 1, "restore/held"))
	c.ExpectOp(t, wire.OpRelease, 2) // the lock the backup holds was released: nothing was restored
	if code, out := run(t, nil, "snapshot", "restore", "--http", p.http, "--admin-secret-file", sec.admin, "--token-floor", "0", backup); code != 0 {
		t.Fatalf("a signed restore right after: exit %d, %q", code, out)
	}
	c.Raw(t, wiretest.Acquire(3, 0, 30, "restore/held"))
	c.ExpectOp(t, wire.OpTimeout, 3) // held again: the backup's lock came back
}
