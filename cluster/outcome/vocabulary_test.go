package outcome_test

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/wire"
)

// VocabularyRow is one row of the table in doc.go.
type VocabularyRow struct {
	Kind, Reason, ClientErr string
	Exit, Status, AdminExit int
}

// ReadVocabulary reads the table of the package doc (doc.go, the file at path): the indented
// lines of six columns after the one that starts with "kind".
func ReadVocabulary(t *testing.T, path string) []VocabularyRow {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []VocabularyRow
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
	for _, line := range lines[start:] {
		f := strings.Fields(strings.TrimPrefix(line, "//\t"))
		if !strings.HasPrefix(line, "//\t") || len(f) != 6 {
			break
		}
		n := make([]int, 3)
		for i, s := range f[3:] {
			if n[i], err = strconv.Atoi(s); err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
		}
		rows = append(rows, VocabularyRow{f[0], f[1], f[2], n[0], n[1], n[2]})
	}
	return rows
}

// The table in doc.go is the code: one row per kind, and each kind's wire reason, the
// client's error for that reason and its HTTP status are the row's. (cmd/latch checks the
// exit codes.)
func TestVocabulary(t *testing.T) {
	rows := ReadVocabulary(t, "doc.go")
	if len(rows) != len(outcome.Kinds) {
		t.Fatalf("doc.go's table has %d rows, for %d kinds: %+v", len(rows), len(outcome.Kinds), rows)
	}
	kinds := map[string]outcome.Kind{
		"Unavailable": outcome.Unavailable, "Indeterminate": outcome.Indeterminate,
		"NotLeader": outcome.NotLeader, "Refused": outcome.Refused,
	}
	sentinels := map[string]error{
		"ErrUnavailable": client.ErrUnavailable, "ErrIndeterminate": client.ErrIndeterminate,
		"ErrTokenExhausted": client.ErrTokenExhausted, "ErrBadKey": client.ErrBadKey,
		"ErrAuth": client.ErrAuth, "ErrUnsupported": client.ErrUnsupported,
	}
	seen := map[outcome.Kind]bool{}
	for _, r := range rows {
		k, ok := kinds[r.Kind]
		if !ok || seen[k] {
			t.Fatalf("row %+v: no such kind, or a second row for it", r)
		}
		seen[k] = true
		err := outcome.New(k, errors.New("cause"))
		reason := outcome.Reason(err)
		if string(reason) != r.Reason || !slices.Contains(wire.Reasons, reason) {
			t.Errorf("%s: wire reason %q, the table says %q", r.Kind, reason, r.Reason)
		}
		if got := outcome.HTTPStatus(err); got != r.Status {
			t.Errorf("%s: HTTP status %d, the table says %d", r.Kind, got, r.Status)
		}
		// The client's error for the reason: the named sentinel, or ServerError when none.
		serr := &client.ServerError{Reason: reason}
		for name, s := range sentinels {
			if want := name == r.ClientErr; errors.Is(serr, s) != want {
				t.Errorf("%s: E %s is %s = %v, want %v (the table says %s)", r.Kind, reason, name, !want, want, r.ClientErr)
			}
		}
		if _, named := sentinels[r.ClientErr]; !named && r.ClientErr != "ServerError" {
			t.Errorf("%s: the table names the client error %q, which is neither a sentinel nor ServerError", r.Kind, r.ClientErr)
		}
	}
}
