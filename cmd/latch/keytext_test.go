package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/clustertest"
)

// Keys a client may hold that would act on a terminal (an OSC title and screen clear, an
// OSC 52 clipboard write, a bidirectional override), look like something else (a no-break
// space), or cannot be typed (NUL): `latch locks` and `locks show` write them quoted with
// Go's escapes, never raw, and every verb takes that quoted form back: `locks show`,
// `locks release`, and the client verbs (`release` of a key whose token it holds).
func TestKeysReachNoTerminal(t *testing.T) {
	clustertest.Slow(t, "starts a latch server and runs the CLI as processes")
	lab := locksLab{sec: newTestSecrets(t)}
	p := startServer(t, nil, lab.sec.serverArgs()...)
	lab.clients, lab.http = p.listen, p.http
	cl, err := client.New(client.Config{Servers: []string{p.listen}, SecretFile: lab.sec.client})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	keys := map[string]string{ // key -> how latch writes it
		"x\x1b]0;PWNED\a\x1b[2J": `"x\x1b]0;PWNED\a\x1b[2J"`,
		"clip\x1b]52;c;aGk=\a":   `"clip\x1b]52;c;aGk=\a"`,
		"\u202etxt.exe":          `"\u202etxt.exe"`,
		"no\u00a0break":          `"no\u00a0break"`,
		"nul\x00key":             `"nul\x00key"`,
	}
	tokens := map[string]uint64{}
	for k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
		tk, err := cl.Acquire(ctx, k, 0, client.AcquireOptions{Lease: time.Hour})
		cancel()
		if err != nil {
			t.Fatalf("acquire %q: %v", k, err)
		}
		tokens[k] = tk.Token
	}
	raw := func(out string) {
		t.Helper()
		for _, bad := range []string{"\x1b", "\x00", "\a", "\u202e", "\u00a0"} {
			if strings.Contains(out, bad) {
				t.Fatalf("output holds %q raw:\n%q", bad, out)
			}
		}
	}
	code, out := run(t, nil, lab.admin(true, "locks")...)
	if code != 0 {
		t.Fatalf("locks: exit %d\n%s", code, out)
	}
	raw(out)
	for k, text := range keys {
		if !strings.Contains(out, text+" ") {
			t.Errorf("locks does not list %q as %s:\n%s", k, text, out)
		}
	}
	code, out = run(t, nil, lab.admin(true, "locks", "show", keys["nul\x00key"])...)
	if raw(out); code != 0 || !strings.HasPrefix(out, keys["nul\x00key"]+" held") {
		t.Fatalf("locks show of the NUL key by its quoted form: exit %d\n%s", code, out)
	}
	code, out = run(t, nil, lab.admin(true, "locks", "release", keys["nul\x00key"])...)
	if raw(out); code != 0 || !strings.HasPrefix(out, "released "+keys["nul\x00key"]) {
		t.Fatalf("locks release of the NUL key: exit %d\n%s", code, out)
	}
	k := "x\x1b]0;PWNED\a\x1b[2J"
	if code, out := run(t, nil, lab.client("release", keys[k], strconv.FormatUint(tokens[k], 10))...); code != 0 {
		t.Fatalf("release of %q by its quoted form: exit %d\n%s", k, code, out)
	}
	code, out = run(t, nil, lab.admin(true, "locks")...)
	if raw(out); code != 0 || strings.Contains(out, `"nul\x00key"`) || strings.Contains(out, keys[k]) {
		t.Fatalf("locks after both releases: exit %d\n%s", code, out)
	}
	if code, out := run(t, nil, lab.admin(true, "locks", "show", `"bad`)...); code != exitUsage || !strings.Contains(out, "not a quoted key") {
		t.Fatalf("locks show of a broken quoted key: exit %d\n%s", code, out)
	}
}
