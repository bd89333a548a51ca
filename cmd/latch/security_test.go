package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/peer"
	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// capturedCall is a signed admin call as it goes over the wire; send sends it as it is, to
// any node, as many times as asked: a replay.
type capturedCall struct {
	method, path string
	header       http.Header
	body         []byte
}

// statusOf is the id and boot id the node behind httpAddr reports in /v1/status.
func statusOf(t *testing.T, httpAddr string) admin.Target {
	t.Helper()
	code, body := httpGet(t, "http://"+httpAddr+"/v1/status")
	var to admin.Target
	if err := json.Unmarshal([]byte(body), &to); code != 200 || err != nil || to.Boot == "" {
		t.Fatalf("/v1/status of %s: %d %v %.300s; want its id and boot", httpAddr, code, err, body)
	}
	return to
}

// signCall signs a call for the node behind httpAddr, as it runs now, with secret.
func signCall(t *testing.T, httpAddr string, secret []byte, method, path string, body []byte) capturedCall {
	t.Helper()
	r, err := http.NewRequest(method, "http://"+httpAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Sign(r, secret, statusOf(t, httpAddr), admin.Digest(body), time.Now()); err != nil {
		t.Fatal(err)
	}
	return capturedCall{method: method, path: path, header: r.Header.Clone(), body: body}
}

// send sends c to the node behind httpAddr and returns the status code and the body.
func (c capturedCall) send(t *testing.T, httpAddr string) (int, []byte) {
	t.Helper()
	r, err := http.NewRequest(c.method, "http://"+httpAddr+c.path, bytes.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header = c.header.Clone()
	resp, err := (&http.Client{Timeout: time.Minute}).Do(r)
	if err != nil {
		t.Fatalf("%s %s to %s: %v", c.method, c.path, httpAddr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// refusedOnClientPort proves secret on the client port at addr and expects auth_failed.
func refusedOnClientPort(t *testing.T, addr string, secret []byte) {
	t.Helper()
	c := wiretest.Dial(t, addr)
	defer c.Close()
	nonce, _ := wire.NewNonce()
	c.Raw(t, wiretest.Hello(1, 0, nonce))
	h := c.Next(t)
	if h.Op != wire.OpHello || h.Hello.Flags&wire.FlagAuthRequired == 0 {
		t.Fatalf("client port hello %+v: want auth required", h)
	}
	c.Raw(t, wiretest.Proof(wire.ClientProof(secret, nonce, h.Hello.Nonce)))
	c.ExpectErrorAndClose(t, 0, wire.ReasonAuthFailed)
}

// peerDialErr dials channel ch of the peer port at addr proving secret.
func peerDialErr(addr string, ch byte, secret []byte) error {
	cfg := peer.DefaultConfig()
	cfg.Secrets = [][]byte{secret}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := peer.Dial(ctx, addr, ch, cfg)
	if err == nil {
		defer conn.Close()
		_, err = admin.CallState(ctx, conn) // only meaningful on ChannelAdmin
	}
	return err
}

// TestPrincipalsAreSeparate runs a cluster whose clients, peers and operators each hold their
// own secret (two lines each, a rotation under way, the peer lines in another order on n2),
// and tries every secret on every port and admin endpoint over real connections: each opens
// only its own, either line of it, and the open endpoints reveal no key names.
func TestPrincipalsAreSeparate(t *testing.T) {
	clustertest.Slow(t, "starts three processes")
	dir := t.TempDir()
	clientNew, peerNew, adminNew := strings.Repeat("C", 40), strings.Repeat("P", 40), strings.Repeat("A", 40)
	clientFile := writeSecretFile(t, dir, "client", clientSecretValue, clientNew)
	peerFiles := []string{writeSecretFile(t, dir, "peer-a", peerSecretValue, peerNew), writeSecretFile(t, dir, "peer-b", peerNew, peerSecretValue)}
	adminFile := writeSecretFile(t, dir, "admin", adminSecretValue, adminNew)
	tc := startClusterWith(t, 3, func(i int) []string {
		return []string{"--secret-file", clientFile, "--peer-secret-file", peerFiles[min(i, 1)], "--admin-secret-file", adminFile}
	})
	l := tc.leader() // every node ready: n2 (proving peerNew) and the others (peerSecretValue) accept each other
	f := (l + 1) % 3

	// Clients: both lines of the client file open the client port (through n2 too, which
	// forwards over the peer port with its own first peer line); the other secrets do not.
	const key = "tenant-7/very-private-key-name"
	for i, s := range []string{clientSecretValue, clientNew} {
		c := wiretest.Dial(t, tc.procs[1].listen)
		c.Hello(t, []byte(s))
		if r := c.Do(t, wiretest.Acquire(1, 0, 300, fmt.Sprintf("%s/%d", key, i))); r.Op != wire.OpAcquire {
			t.Fatalf("acquire with client secret line %d through n2: %s", i+1, wiretest.Describe(r))
		}
		c.Close()
	}
	for _, s := range []string{peerSecretValue, peerNew, adminSecretValue} {
		refusedOnClientPort(t, tc.procs[f].listen, []byte(s))
	}

	// The peer port: the client and admin secrets are refused on every channel of every
	// node; both peer lines get in.
	for i, addr := range tc.raft {
		for _, s := range []string{clientSecretValue, clientNew, adminSecretValue} {
			for _, ch := range []byte{peer.ChannelRaft, peer.ChannelForward, peer.ChannelAdmin} {
				if err := peerDialErr(addr, ch, []byte(s)); !errors.Is(err, peer.ErrRejected) {
					t.Errorf("n%d peer port, channel %q, a non-peer secret: %v, want ErrRejected", i+1, ch, err)
				}
			}
		}
		for _, s := range []string{peerSecretValue, peerNew} {
			if err := peerDialErr(addr, peer.ChannelAdmin, []byte(s)); err != nil {
				t.Errorf("n%d peer port with a peer secret line: %v", i+1, err)
			}
		}
	}

	// Admin calls: both admin lines work through the CLI; --secret-file is not an admin
	// credential and the CLI says which flag is.
	backup := filepath.Join(dir, "backup.snap")
	onlyNew := writeSecretFile(t, dir, "admin-new", adminNew)
	for _, file := range []string{adminFile, onlyNew} {
		if code, out := run(t, nil, "snapshot", "save", "--http", tc.procs[f].http, "--admin-secret-file", file, backup); code != 0 {
			t.Fatalf("snapshot save with %s: exit %d, %q", file, code, out)
		}
	}
	if code, out := run(t, nil, "snapshot", "save", "--http", tc.procs[f].http, "--secret-file", clientFile, backup); code != exitUsage ||
		!strings.Contains(out, "--admin-secret-file") {
		t.Fatalf("snapshot save with --secret-file: exit %d, %q; want exit 64 naming --admin-secret-file", code, out)
	}
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	// The client and peer secrets on every admin endpoint of every node: 401 or 403 with a
	// body naming the admin credential; nothing changes.
	endpoints := []struct {
		method, path string
		body         []byte
	}{
		{"POST", "/v1/peers", []byte(`{"id":"n9","addr":"127.0.0.1:1","nonvoter":true}`)},
		{"DELETE", "/v1/peers/n3", nil},
		{"GET", "/v1/snapshot", nil},
		{"POST", "/v1/restore?token_floor=0", data},
	}
	for _, p := range tc.procs {
		for _, e := range endpoints {
			for _, c := range []struct {
				secret string
				code   int
			}{{clientSecretValue, 401}, {clientNew, 401}, {peerSecretValue, 403}, {peerNew, 403}} {
				code, body := signCall(t, p.http, []byte(c.secret), e.method, e.path, e.body).send(t, p.http)
				if code != c.code || !bytes.Contains(body, []byte("--admin-secret-file")) {
					t.Errorf("%s %s %s signed with a %d-secret: %d %s; want %d naming --admin-secret-file", p.http, e.method, e.path, c.code, code, body, c.code)
				}
			}
			unsigned := capturedCall{method: e.method, path: e.path, header: http.Header{"Content-Type": {admin.ContentType(e.path)}}, body: e.body}
			if code, body := unsigned.send(t, p.http); code != 401 || !bytes.Contains(body, []byte("--admin-secret-file")) {
				t.Errorf("%s %s %s unsigned: %d %s", p.http, e.method, e.path, code, body)
			}
		}
	}
	if code, out := run(t, nil, "peers", "list", "--http", tc.procs[f].http); code != 0 || strings.Count(out, " voter") != 3 || strings.Contains(out, "n9") {
		t.Fatalf("members after the refused calls: exit %d\n%s", code, out)
	}
	c := wiretest.Dial(t, tc.procs[l].listen)
	c.Hello(t, []byte(clientSecretValue))
	c.Raw(t, wiretest.Acquire(5, 0, 30, key+"/0"))
	c.ExpectOp(t, wire.OpTimeout, 5) // still held: no restore went through

	// What stays open for probes and scrapers reveals no key names.
	for _, p := range tc.procs {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/status", "/v1/peers"} {
			code, body := httpGet(t, "http://"+p.http+path)
			if code != 200 || strings.Contains(body, "very-private") {
				t.Errorf("GET %s%s: %d, reveals a key name: %v", p.http, path, code, strings.Contains(body, "very-private"))
			}
		}
	}
}

// TestKeyFilesOthersMayWrite: a secret or key file its group or others may write is refused,
// naming the flag, the file and the fix; one readable by others is used, with one warning.
func TestKeyFilesOthersMayWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, cert, key := testPKI(t, dir, "perm")
	secret := writeSecretFile(t, dir, "secret", clientSecretValue)
	for _, flag := range []string{"secret-file", "peer-secret-file", "admin-secret-file", "tls-key"} {
		file := secret
		if flag == "tls-key" {
			file = key
		}
		if err := os.Chmod(file, 0o622); err != nil {
			t.Fatal(err)
		}
		args := []string{"server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--" + flag, file}
		if flag == "tls-key" {
			args = append(args, "--tls-cert", cert)
		}
		code, out := run(t, nil, args...)
		if code == 0 || !strings.Contains(out, "--"+flag) || !strings.Contains(out, "chmod 600 "+file) || strings.Contains(out, clientSecretValue) {
			t.Errorf("--%s writable by others: exit %d, %q; want a refusal naming the flag, the file and chmod 600", flag, code, out)
		}
		if err := os.Chmod(file, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The client verbs refuse it too.
	os.Chmod(secret, 0o666)
	if code, out := run(t, nil, "acquire", "--servers", "127.0.0.1:1", "--secret-file", secret, "k"); code != exitUsage || !strings.Contains(out, "chmod 600") {
		t.Errorf("latch acquire with a world-writable --secret-file: exit %d, %q", code, out)
	}
	os.Chmod(secret, 0o644)
	p := startServer(t, nil, "--secret-file", secret)
	if n := strings.Count(p.stderr.String(), "readable by others"); n != 1 || !strings.Contains(p.stderr.String(), "chmod 600 "+secret) {
		t.Fatalf("a world-readable --secret-file: %d warnings, want 1 naming chmod 600:\n%s", n, p.stderr.String())
	}
}

// TestClusterRefusesAnOpenPrincipal: a cluster node that authenticates clients (or anything)
// refuses to start while its peer port or its admin calls have no credential of their own,
// whatever --insecure says, in one line naming the flags to add.
func TestClusterRefusesAnOpenPrincipal(t *testing.T) {
	t.Parallel()
	sec := newTestSecrets(t)
	ca, cert, key := testPKI(t, t.TempDir(), "open")
	base := []string{"server", "--mode", "cluster", "--id", "n1", "--data-dir", t.TempDir(), "--bootstrap",
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--insecure"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--secret-file", sec.client}, []string{"--peer-secret-file", "--tls-ca"}},
		{[]string{"--secret-file", sec.client, "--admin-secret-file", sec.admin}, []string{"--peer-secret-file"}},
		{[]string{"--secret-file", sec.client, "--peer-secret-file", sec.peer}, []string{"--admin-secret-file", "--admin-tls-ca"}},
		{[]string{"--peer-secret-file", sec.peer}, []string{"--admin-secret-file"}},
		// Peers on mutual TLS alone cannot sign a join over plain HTTP.
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, "--admin-secret-file", sec.admin, "--join", "127.0.0.1:1"},
			[]string{"--peer-secret-file", "https://"}},
	} {
		args := append(base, c.args...)
		if slices.Contains(c.args, "--join") {
			args = slices.DeleteFunc(args, func(a string) bool { return a == "--bootstrap" })
		}
		code, out := run(t, nil, args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		ok := code != 0 && len(lines) == 1
		for _, w := range c.want {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("%v: exit %d, %q; want one line naming %v", c.args, code, out, c.want)
		}
	}
}
