package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latchd/latch/cluster/clustertest"
)

// TestExitCodes runs every verb with each kind of failure it can meet and checks the exit
// code against README's table: usage errors and bad values 64 (in one line, with a pointer
// to --help), refused 65, unavailable 69, local files 74, not acquired 75, not held 1, and
// run's 126, 127 and passed-through statuses.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	srv, dead := "--servers="+p.listen, "--servers="+clustertest.DeadAddr(t)
	deadHTTP, nonLatch := "--http="+clustertest.DeadAddr(t), "--servers="+clustertest.NonLatchAddr(t)
	// An hour: the rows are parallel subtests, which on a busy 2-core machine may start a
	// minute or more after this (a minute's lease ran out once in CI).
	if code, out := run(t, nil, "acquire", srv, "--lease", "1h", "held"); code != 0 {
		t.Fatalf("acquire: exit %d, %s", code, out)
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A data directory a node must not start from: a promise without the raft.db it backs
	// (amnesia_test.go plants the other damages).
	damaged := filepath.Join(dir, "damaged")
	if err := os.MkdirAll(damaged, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, "promised.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A data directory a newer latch wrote in a format this one cannot read.
	newer := filepath.Join(dir, "newer")
	if err := os.MkdirAll(newer, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(newer, "format.json"), []byte(`{"format":99,"written_by":"v99.0.0"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := writeSecretFile(t, dir, "shared", strings.Repeat("s", 40)) // one secret for two principals
	// A server with a client secret and no admin credential: its lock calls are off.
	off := startServer(t, nil, "--secret-file", writeSecretFile(t, dir, "client", clientSecretValue))
	rows := []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{"latch bare", nil, nil, exitUsage},
		{"unknown verb", nil, []string{"bogus"}, exitUsage},
		{"unknown global flag", nil, []string{"--bogus"}, exitUsage},
		{"help unknown verb", nil, []string{"help", "bogus"}, exitUsage},
		{"help of a verb", nil, []string{"help", "locks"}, 0},

		{"acquire no key", nil, []string{"acquire", srv}, exitUsage},
		{"acquire two keys", nil, []string{"acquire", srv, "a", "b"}, exitUsage},
		{"acquire flag after key", nil, []string{"acquire", srv, "k", "--lease", "5s"}, exitUsage},
		{"acquire unknown flag", nil, []string{"acquire", "--nope", "k"}, exitUsage},
		{"acquire bad duration", nil, []string{"acquire", srv, "--lease", "10", "k"}, exitUsage},
		{"acquire lease 0s", nil, []string{"acquire", srv, "--lease", "0s", "k"}, exitUsage},
		{"acquire LATCH_LEASE=0s", []string{"LATCH_LEASE=0s"}, []string{"acquire", srv, "k"}, exitUsage},
		{"acquire wait out of range", nil, []string{"acquire", srv, "--wait", "256s", "k"}, exitUsage},
		{"acquire budget = lease", nil, []string{"acquire", srv, "--lease", "60s", "--budget", "60s", "k"}, exitUsage},
		{"acquire bad key", nil, []string{"acquire", srv, "bad key"}, exitUsage},
		{"acquire dead server", nil, []string{"acquire", dead, "--wait", "1s", "k"}, exitUnavailable},
		{"acquire not latch", nil, []string{"acquire", nonLatch, "--wait", "1s", "k"}, exitUnavailable},
		{"acquire held", nil, []string{"acquire", srv, "held"}, exitNotAcquired},

		{"release no token", nil, []string{"release", srv, "k"}, exitUsage},
		{"release bad token", nil, []string{"release", srv, "k", "x"}, exitUsage},
		{"release token 0", nil, []string{"release", srv, "k", "0"}, exitUsage}, // as locks release --token 0
		{"release negative token", nil, []string{"release", srv, "k", "-1"}, exitUsage},
		{"release token past the counter", nil, []string{"release", srv, "k", "99999999999999999999"}, exitUsage},
		{"extend token 0", nil, []string{"extend", srv, "k", "0"}, exitUsage},
		{"release bad flag", nil, []string{"release", "--servers", "k", "1"}, exitUsage},
		{"release not held", nil, []string{"release", srv, "k", "99"}, exitNotHeld},
		{"release dead server", nil, []string{"release", dead, "k", "1"}, exitUnavailable},

		{"ping extra argument", nil, []string{"ping", srv, "x"}, exitUsage},
		{"ping dead server", nil, []string{"ping", dead}, exitUnavailable},

		{"run no command", nil, []string{"run", srv, "k"}, exitUsage},
		{"run flag after key", nil, []string{"run", srv, "k", "--lease", "5s", "--", "true"}, exitUsage},
		{"run default budget not below lease", nil, []string{"run", srv, "--lease", "3s", "--kill-grace", "2s", "k", "--", "true"}, exitUsage},
		{"run budget = lease", nil, []string{"run", srv, "--lease", "10s", "--kill-grace", "1s", "--budget", "10s", "k", "--", "true"}, exitUsage},
		{"run lease 0s", nil, []string{"run", srv, "--lease", "0s", "k", "--", "true"}, exitUsage},
		{"run bad duration", nil, []string{"run", srv, "--kill-grace", "2", "k", "--", "true"}, exitUsage},
		{"run command not found", nil, []string{"run", srv, "k", "--", filepath.Join(dir, "missing.sh")}, exitNotFound},
		{"run command not executable", nil, []string{"run", srv, "k", "--", plain}, exitCannotRun},
		{"run dead server", nil, []string{"run", dead, "--wait", "1s", "k", "--", "true"}, exitUnavailable},
		{"run held", nil, []string{"run", srv, "held", "--", "true"}, exitNotAcquired},
		{"run command status", nil, []string{"run", srv, "k1", "--", "sh", "-c", "exit 7"}, 7},
		{"run command signal", nil, []string{"run", srv, "k2", "--", "sh", "-c", "kill -USR1 $$"}, 128 + 10},

		{"bench extra argument", nil, []string{"bench", srv, "x"}, exitUsage},
		{"bench bad value", nil, []string{"bench", srv, "--clients", "0"}, exitUsage},
		{"bench lease 0s", nil, []string{"bench", srv, "--lease", "0s"}, exitUsage},

		{"status extra argument", nil, []string{"status", "--http", p.http, "x"}, exitUsage},
		{"status bad flag", nil, []string{"status", "--json=maybe"}, exitUsage},
		{"status dead node", nil, []string{"status", deadHTTP}, exitUnavailable},

		{"locks extra argument", nil, []string{"locks", "--http", p.http, "x"}, exitUsage},
		{"locks bad limit", nil, []string{"locks", "--http", p.http, "--limit", "-1"}, exitUsage},
		{"locks dead node", nil, []string{"locks", deadHTTP}, exitUnavailable},
		{"locks show no key", nil, []string{"locks", "show", "--http", p.http}, exitUsage},
		{"locks show bad key", nil, []string{"locks", "show", "--http", p.http, "bad key"}, exitUsage},
		{"locks show dead node", nil, []string{"locks", "show", deadHTTP, "k"}, exitUnavailable},
		{"locks release bad token", nil, []string{"locks", "release", "--http", p.http, "--token", "0", "held"}, exitUsage},
		{"locks release not held", nil, []string{"locks", "release", "--http", p.http, "--token", "99", "held"}, exitNotHeld},
		{"locks release free key", nil, []string{"locks", "release", "--http", p.http, "free"}, exitNotHeld},
		{"locks off (client secret, no admin credential)", nil, []string{"locks", "--http", off.http}, exitUnavailable},
		{"locks show off", nil, []string{"locks", "show", "--http", off.http, "k"}, exitUnavailable},
		{"locks release off", nil, []string{"locks", "release", "--http", off.http, "k"}, exitUnavailable},

		{"peers bare", nil, []string{"peers"}, exitUsage},
		{"peers unknown", nil, []string{"peers", "bogus"}, exitUsage},
		{"peers list single mode", nil, []string{"peers", "list", "--http", p.http}, exitRefused},
		{"peers list dead node", nil, []string{"peers", "list", deadHTTP}, exitUnavailable},
		{"peers add no --raft-addr", nil, []string{"peers", "add", "--http", p.http, "--id", "n9"}, exitUsage},
		{"peers remove no --id", nil, []string{"peers", "remove", "--http", p.http}, exitUsage},
		{"peers remove single mode", nil, []string{"peers", "remove", "--http", p.http, "--id", "n9"}, exitRefused},
		{"peers remove dead node", nil, []string{"peers", "remove", deadHTTP, "--id", "n9"}, exitUnavailable},

		{"snapshot bare", nil, []string{"snapshot"}, exitUsage}, // prints the help, as bare latch
		{"snapshot save no file", nil, []string{"snapshot", "save", "--http", p.http}, exitUsage},
		{"snapshot save single mode", nil, []string{"snapshot", "save", "--http", p.http, filepath.Join(dir, "s")}, exitRefused},
		{"snapshot save dead node", nil, []string{"snapshot", "save", deadHTTP, filepath.Join(dir, "s")}, exitUnavailable},
		{"snapshot restore no --token-floor", nil, []string{"snapshot", "restore", "--http", p.http, plain}, exitUsage},
		{"snapshot restore missing file", nil, []string{"snapshot", "restore", "--http", p.http, "--token-floor", "0", filepath.Join(dir, "none")}, exitUsage},

		{"recover no --data-dir", nil, []string{"recover", "--dry-run"}, exitUsage},
		{"recover extra argument", nil, []string{"recover", "--data-dir", dir, "x"}, exitUsage},
		{"recover empty data dir", nil, []string{"recover", "--data-dir", filepath.Join(dir, "none"), "--dry-run"}, exitLocalIO},

		{"server extra argument", nil, []string{"server", "x"}, exitUsage},
		{"server bad value", nil, []string{"server", "--max-conns", "many"}, exitUsage},
		{"server damaged data dir", nil, []string{"server", "--mode", "cluster", "--id", "n1", "--data-dir", damaged, "--bootstrap",
			"--raft-addr", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitLocalIO},
		{"server data dir of a newer format", nil, []string{"server", "--mode", "cluster", "--id", "n1", "--data-dir", newer, "--bootstrap",
			"--raft-addr", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitLocalIO},
		{"server single with cluster flags", nil, []string{"server", "--mode", "single", "--id", "x", "--data-dir", filepath.Join(dir, "single"),
			"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitUsage},
		{"server cluster with no way in", nil, []string{"server", "--mode", "cluster", "--id", "n1", "--data-dir", filepath.Join(dir, "lonely"),
			"--raft-addr", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitUsage},
		{"server cluster without id", nil, []string{"server", "--mode", "cluster", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitUsage},
		{"server token floor at the end", nil, []string{"server", "--token-floor", "9223372036854775807", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitUsage},
		{"server one secret for two principals", nil, []string{"server", "--secret-file", shared, "--admin-secret-file", shared,
			"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, exitUsage},
		{"version extra argument", nil, []string{"version", "x"}, exitUsage},
	}
	// The rows run in parallel inside one group, which ends only when they all have: the
	// check after it sees what they left behind.
	t.Run("rows", func(t *testing.T) {
		for _, r := range rows {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				code, out := run(t, r.env, r.args...)
				if code != r.want {
					t.Fatalf("latch %s: exit %d, want %d:\n%s", strings.Join(r.args, " "), code, r.want, out)
				}
				if bare := strings.HasSuffix(r.name, " bare") || r.args == nil; bare && !strings.Contains(out, "COMMANDS:") {
					t.Fatalf("latch %s: exit 64 without the help:\n%s", strings.Join(r.args, " "), out)
				}
				if r.want == exitUsage && !strings.HasSuffix(r.name, " bare") {
					// One line, naming --help; never the whole help text.
					if strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "--help") {
						t.Fatalf("latch %s: usage error is not one line pointing to --help:\n%s", strings.Join(r.args, " "), out)
					}
				}
			})
		}
	})
	// What the verbs say where the words used to mislead (issue: a release of an out-of-range
	// token "not a whole number", -1 "a flag", a forced release of a free key "not held by
	// that token").
	for _, m := range []struct {
		args []string
		says string
	}{
		{[]string{"release", srv, "k", "99999999999999999999"}, "TOKEN 99999999999999999999: tokens are 1..9223372036854775807"},
		{[]string{"release", srv, "k", "-1"}, "TOKEN -1: tokens are 1.."},
		{[]string{"locks", "release", "--http", p.http, "free"}, "not released: the key is free\n"},
		{[]string{"locks", "release", "--http", p.http, "--token", "99", "held"}, "not released: its holder is token 1, not 99\n"},
	} {
		if _, out := run(t, nil, m.args...); !strings.Contains(out, m.says) {
			t.Errorf("latch %s says %q, want %q in it", strings.Join(m.args, " "), out, m.says)
		}
	}
	// Nothing above took a grant except the first acquire and the two run rows that ran:
	// the refused runs (not found, not executable, flags after KEY) took none.
	if code, out := run(t, nil, "acquire", srv, "k"); code != 0 || !strings.HasPrefix(out, "token ") {
		t.Fatalf("acquire k: exit %d, %s", code, out)
	}
}

// A verb that fails writes nothing on stdout (a script reading it never takes a header or a
// half answer for a result); what went wrong is on stderr.
func TestFailedVerbsWriteNothingOnStdout(t *testing.T) {
	t.Parallel()
	dead, deadHTTP := "--servers="+clustertest.DeadAddr(t), "--http="+clustertest.DeadAddr(t)
	for _, args := range [][]string{
		{"acquire", dead, "--wait", "1s", "k"},
		{"release", dead, "k", "1"},
		{"extend", dead, "k", "1"},
		{"ping", dead},
		{"run", dead, "--wait", "1s", "k", "--", "true"},
		{"bench", dead, "--duration", "1s"},
		{"status", deadHTTP},
		{"locks", deadHTTP},
		{"locks", "show", deadHTTP, "k"},
		{"peers", "list", deadHTTP},
	} {
		cmd := exec.Command(latchBin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil || stdout.Len() != 0 || stderr.Len() == 0 {
			t.Errorf("latch %s: %v, stdout %q, stderr %q; want a failure said on stderr only", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
	}
}
