package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/admin"
	"github.com/latchd/latch/cluster/outcome"
)

// TestExitCodesFollowTheVocabulary reads the table of cluster/outcome's package doc and
// checks its two exit columns against this command: for each kind, the exit code of a lock
// verb whose server answered the kind's wire reason (outcome.Reason, then the client's error
// for that reason, then exitFor), and that of an admin verb whose node answered the kind's
// HTTP status (outcome.HTTPStatus, then adminExit). cluster/outcome's TestVocabulary checks
// the other columns.
func TestExitCodesFollowTheVocabulary(t *testing.T) {
	kinds := map[string]outcome.Kind{
		"Unavailable": outcome.Unavailable, "Indeterminate": outcome.Indeterminate,
		"NotLeader": outcome.NotLeader, "Refused": outcome.Refused,
	}
	rows := vocabularyRows(t, "../../cluster/outcome/doc.go")
	if len(rows) != len(outcome.Kinds) {
		t.Fatalf("cluster/outcome's table has %d rows, for %d kinds", len(rows), len(outcome.Kinds))
	}
	for _, r := range rows {
		k, ok := kinds[r.kind]
		if !ok {
			t.Fatalf("row %+v: no such kind", r)
		}
		err := outcome.New(k, errors.New("cause"))
		lock := exitFor("acquire", fmt.Errorf("latch: acquire %q: %w", "k", &client.ServerError{Reason: outcome.Reason(err)}))
		if got := exitCode(lock); got != r.exit {
			t.Errorf("%s: a lock verb exits %d (%v), the table says %d", r.kind, got, lock, r.exit)
		}
		adm := adminExit("peers add", &admin.StatusError{Code: outcome.HTTPStatus(err), Status: strconv.Itoa(outcome.HTTPStatus(err)), Msg: err.Error()})
		if got := exitCode(adm); got != r.adminExit {
			t.Errorf("%s: an admin verb exits %d (%v), the table says %d", r.kind, got, adm, r.adminExit)
		}
	}
}

// vocabularyRow is one row of cluster/outcome's table: the kind and its two exit codes.
type vocabularyRow struct {
	kind            string
	exit, adminExit int
}

// vocabularyRows reads the table of the package doc at path: the indented lines of six
// columns after the one that starts with "kind" (the layout cluster/outcome's TestVocabulary
// reads too).
func vocabularyRows(t *testing.T, path string) []vocabularyRow {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	start := -1
	for i, line := range lines {
		if strings.HasPrefix(line, "//\tkind ") {
			start = i + 1
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no table (no line \"//\\tkind ...\")", path)
	}
	var rows []vocabularyRow
	for _, line := range lines[start:] {
		f := strings.Fields(strings.TrimPrefix(line, "//\t"))
		if !strings.HasPrefix(line, "//\t") || len(f) != 6 {
			break
		}
		exit, err1 := strconv.Atoi(f[3])
		adminExit, err2 := strconv.Atoi(f[5])
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		rows = append(rows, vocabularyRow{f[0], exit, adminExit})
	}
	return rows
}
