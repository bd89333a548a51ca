package fencetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/latchd/latch/client/fence"
)

// docs/fencing.md is followed as a reader would: its SQL is the SQL package fence runs,
// and its PostgreSQL example runs with psql under `latch run`.

func readGuide(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "fencing.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// guideBlock returns the code block that follows <!-- fencetest:NAME --> in the guide.
func guideBlock(t *testing.T, guide, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(guide, "<!-- fencetest:"+name+" -->\n")
	if !ok {
		t.Fatalf("docs/fencing.md has no block marked fencetest:%s", name)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the ``` line
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("the fencetest:%s block is not closed", name)
	}
	return block + "\n"
}

var spaces = regexp.MustCompile(`\s+`)

func oneLine(s string) string { return spaces.ReplaceAllString(s, " ") }

// Every statement package fence runs appears in the guide, word for word.
func TestGuideStatements(t *testing.T) {
	guide := oneLine(readGuide(t))
	for _, d := range []fence.Dialect{fence.PostgreSQL, fence.SQLite, fence.MySQL} {
		st, err := fence.Table{Dialect: d}.Statements()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{st.Create, st.Check, st.Read} {
			if !strings.Contains(guide, s+";") {
				t.Errorf("docs/fencing.md lacks the %v statement %q", d, s)
			}
		}
	}
}

// The guide's PostgreSQL example: setup.sql through psql, nightly.sh under `latch run`
// (accepted, the report written under its token), then the same script with an older
// token (refused with "stale token", exit status 3, the report unchanged).
func TestGuidePostgreSQLExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and latch; skipped with -short")
	}
	srv := postgres(t)
	psql := filepath.Join(srv.bin, "psql")
	if !isExec(psql) {
		t.Skipf("no psql next to postgres in %s", srv.bin)
	}
	guide := readGuide(t)
	dir := t.TempDir()
	for _, name := range []string{"setup.sql", "nightly.sh"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(guideBlock(t, guide, name)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	db, dsn := srv.newDatabase(t)
	env := append(os.Environ(), "DATABASE_URL="+dsn, "PATH="+srv.bin+":"+os.Getenv("PATH"))
	run := func(extraEnv []string, name string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(env, extraEnv...)
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("%s: %v", name, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run(nil, psql, dsn, "-X", "-v", "ON_ERROR_STOP=1", "-f", "setup.sql"); code != 0 {
		t.Fatalf("psql -f setup.sql: exit %d\n%s", code, out)
	}
	if out, code := run(nil, psql, dsn, "-X", "-v", "ON_ERROR_STOP=1", "-f", "setup.sql"); code != 0 {
		t.Fatalf("setup.sql a second time: exit %d\n%s", code, out)
	}
	addr := startLatch(t)
	runJob := func() uint64 {
		t.Helper()
		out, code := run(nil, latchBin(t), "run", "--servers", addr, "--wait", "30s", "--lease", "1m", "--kill-grace", "5s", "jobs/nightly", "--", "./nightly.sh")
		m := regexp.MustCompile(`report written under token (\d+)`).FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("latch run -- ./nightly.sh: exit %d\n%s", code, out)
		}
		tok, _ := strconv.ParseUint(m[1], 10, 64)
		return tok
	}
	first, second := runJob(), runJob()
	if second <= first {
		t.Fatalf("second job's token %d not above the first's %d", second, first)
	}
	out, code := run([]string{"LATCH_TOKEN=" + strconv.FormatUint(first, 10)}, "./nightly.sh")
	want := "stale token " + strconv.FormatUint(first, 10) + " for reports/nightly: token " + strconv.FormatUint(second, 10) + " has been accepted"
	if code != 3 || !strings.Contains(out, want) || strings.Contains(out, "report written") {
		t.Fatalf("nightly.sh with the old token %d: exit %d\n%s\nwant exit 3 and %q", first, code, out, want)
	}
	var token int64
	var body string
	if err := db.QueryRow("SELECT token, body FROM reports WHERE name = 'nightly'").Scan(&token, &body); err != nil {
		t.Fatal(err)
	}
	if uint64(token) != second || !strings.HasPrefix(body, "nightly report, ") {
		t.Fatalf("report by token %d (%q), want the second job's %d", token, body, second)
	}
	m, _, err := fence.Table{Dialect: fence.PostgreSQL}.Mark(context.Background(), db, "reports/nightly")
	if err != nil || m != second {
		t.Fatalf("fence mark %d (%v), want %d", m, err, second)
	}
}
