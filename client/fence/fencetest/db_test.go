package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchd/latch/client/fence"
)

// These scenarios run on every database the module tests (sqlite_test.go, postgres_test.go),
// each on a fresh database holding the fence table and one data row, reports(id=1, body,
// writes), that the writers update under the fence.

// store is a fresh database with its fence table and its reports row.
type store struct {
	db      *sql.DB
	fences  fence.Table
	dialect fence.Dialect
}

func (s *store) q(query string) string { return placeholders(s.dialect, query) }

// placeholders turns ? into $1, $2, ... for PostgreSQL.
func placeholders(d fence.Dialect, query string) string {
	if d != fence.PostgreSQL {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

const reportsDDL = "CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT NOT NULL, last BIGINT NOT NULL, writes INTEGER NOT NULL)"

func newStore(t *testing.T, db *sql.DB, d fence.Dialect) *store {
	t.Helper()
	s := &store{db: db, fences: fence.Table{Dialect: d}, dialect: d}
	ctx := context.Background()
	if err := s.fences.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := s.fences.Create(ctx, db); err != nil { // IF NOT EXISTS: a second Create is fine
		t.Fatalf("second Create: %v", err)
	}
	if _, err := db.ExecContext(ctx, reportsDDL); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO reports VALUES (1, 'empty', 0, 0)"); err != nil {
		t.Fatal(err)
	}
	return s
}

// write is one holder's write: in one transaction, the fence check, then the report. It
// returns the last token that wrote the report before this one (read after the check, so
// under the fence row's lock).
func (s *store) write(ctx context.Context, resource string, token uint64, body string) (prev int64, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if err := s.fences.Check(ctx, tx, resource, token); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, "SELECT last FROM reports WHERE id = 1").Scan(&prev); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.q("UPDATE reports SET body = ?, last = ?, writes = writes + 1 WHERE id = 1"), body, int64(token)); err != nil {
		return 0, err
	}
	return prev, tx.Commit()
}

func (s *store) report(t *testing.T) (body string, last int64, writes int) {
	t.Helper()
	if err := s.db.QueryRow("SELECT body, last, writes FROM reports WHERE id = 1").Scan(&body, &last, &writes); err != nil {
		t.Fatal(err)
	}
	return body, last, writes
}

func (s *store) mustMark(t *testing.T, resource string, want uint64) {
	t.Helper()
	m, ok, err := s.fences.Mark(context.Background(), s.db, resource)
	if err != nil || !ok || m != want {
		t.Fatalf("mark of %s: %d %v %v, want %d", resource, m, ok, err, want)
	}
}

func mustStale(t *testing.T, err error, token, seen uint64) {
	t.Helper()
	var stale *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) {
		t.Fatalf("token %d: %v, want a stale refusal", token, err)
	}
	if stale.Token != token || stale.Seen != seen {
		t.Fatalf("refusal says token %d seen %d, want %d and %d", stale.Token, stale.Seen, token, seen)
	}
}

// A stale holder's write is refused and leaves the data and the mark alone; the current
// holder may write again with the same token.
func testStaleHolder(t *testing.T, s *store) {
	ctx := context.Background()
	if _, err := s.write(ctx, "reports", 10, "by 10"); err != nil {
		t.Fatal(err)
	}
	_, err := s.write(ctx, "reports", 9, "by 9, late")
	mustStale(t, err, 9, 10)
	if body, last, _ := s.report(t); body != "by 10" || last != 10 {
		t.Fatalf("report %q by %d after the stale write, want token 10's", body, last)
	}
	s.mustMark(t, "reports", 10)
	if _, err := s.write(ctx, "reports", 10, "by 10 again"); err != nil {
		t.Fatalf("the same holder writing again: %v", err)
	}
	if _, err := s.write(ctx, "reports", 11, "by 11"); err != nil {
		t.Fatal(err)
	}
	_, err = s.write(ctx, "reports", 10, "by 10, late")
	mustStale(t, err, 10, 11)
	if _, ok, _ := s.fences.Mark(ctx, s.db, "other"); ok {
		t.Fatal("a resource never written has a mark")
	}
}

// A transaction that passed the check and rolled back leaves the mark where it was.
func testRollback(t *testing.T, s *store) {
	ctx := context.Background()
	if _, err := s.write(ctx, "reports", 10, "by 10"); err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.fences.Check(ctx, tx, "reports", 20); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE reports SET body = 'by 20' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	s.mustMark(t, "reports", 10)
	// A first write of a new resource that rolls back leaves no mark at all.
	tx, _ = s.db.BeginTx(ctx, nil)
	if err := s.fences.Check(ctx, tx, "fresh", 30); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	if m, ok, err := s.fences.Mark(ctx, s.db, "fresh"); ok || err != nil {
		t.Fatalf("fresh after a rollback: mark %d %v %v, want none", m, ok, err)
	}
	if _, err := s.write(ctx, "reports", 15, "by 15"); err != nil {
		t.Fatalf("token 15 after the rolled-back 20: %v, want accepted", err)
	}
	s.mustMark(t, "reports", 15)
	if body, _, _ := s.report(t); body != "by 15" {
		t.Fatalf("report %q, want token 15's", body)
	}
}

// Tokens up to 2^63-1 round-trip through the BIGINT column exactly; above it nothing is
// sent.
func testBigTokens(t *testing.T, s *store) {
	ctx := context.Background()
	max := fence.MaxToken
	for _, tok := range []uint64{1, max - 2, max - 1, max, max} {
		if _, err := s.write(ctx, "big", tok, "ok"); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
		s.mustMark(t, "big", tok)
		if _, last, _ := s.report(t); uint64(last) != tok {
			t.Fatalf("report last %d, want %d", last, tok)
		}
	}
	_, err := s.write(ctx, "big", max-1, "late")
	mustStale(t, err, max-1, max)
	for _, tok := range []uint64{0, max + 1, 1<<64 - 1} {
		if _, err := s.write(ctx, "big", tok, "bad"); !errors.Is(err, fence.ErrInvalidToken) {
			t.Fatalf("token %d: %v, want ErrInvalidToken", tok, err)
		}
	}
	s.mustMark(t, "big", max)
}

// Writers race with interleaved tokens. In the order the writes committed (each write
// reads its predecessor's token under the fence row's lock), the tokens never go down;
// every refusal names a higher token; the report and the mark end at the highest token.
func testConcurrentWriters(t *testing.T, s *store) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const writers, each = 6, 25
	var accepted, refused sync.Map
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				tok := uint64(i*writers + w + 1)
				prev, err := s.write(ctx, "reports", tok, fmt.Sprint("by ", tok))
				var stale *fence.StaleError
				switch {
				case errors.As(err, &stale):
					if stale.Seen <= tok {
						t.Errorf("token %d refused with seen %d", tok, stale.Seen)
					}
					refused.Store(tok, true)
				case err != nil:
					t.Errorf("token %d: %v", tok, err)
					return
				default:
					if uint64(prev) > tok {
						t.Errorf("token %d wrote after token %d", tok, prev)
					}
					accepted.Store(tok, true)
				}
			}
		})
	}
	wg.Wait()
	n := 0
	accepted.Range(func(any, any) bool { n++; return true })
	top := uint64(writers * each)
	if _, ok := accepted.Load(top); !ok {
		t.Fatalf("the highest token %d was not accepted", top)
	}
	body, last, writes := s.report(t)
	if uint64(last) != top || body != fmt.Sprint("by ", top) || writes != n {
		t.Fatalf("report %q by %d after %d writes, want token %d's after %d accepted", body, last, writes, top, n)
	}
	s.mustMark(t, "reports", top)
	t.Logf("%d writes accepted, the others refused", n)
}

// A fence table with a schema-qualified name of its own works like the default one.
func testNamedTable(t *testing.T, s *store) {
	ctx := context.Background()
	var name string
	switch s.dialect {
	case fence.PostgreSQL:
		if _, err := s.db.Exec("CREATE SCHEMA app"); err != nil {
			t.Fatal(err)
		}
		name = "app.fences"
	case fence.SQLite:
		name = "main.fences"
	case fence.MySQL:
		if err := s.db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		name += ".fences"
	}
	s.fences = fence.Table{Dialect: s.dialect, Name: name}
	if err := s.fences.Create(ctx, s.db); err != nil {
		t.Fatal(err)
	}
	testStaleHolder(t, s)
	if m, ok, err := (fence.Table{Dialect: s.dialect}).Mark(ctx, s.db, "reports"); ok || err != nil {
		t.Fatalf("the default fence table has mark %d (%v) for reports, want none: the named table was not used", m, err)
	}
}

// scenarios are the tests every database runs.
var scenarios = []struct {
	name string
	run  func(*testing.T, *store)
}{
	{"StaleHolder", testStaleHolder},
	{"Rollback", testRollback},
	{"BigTokens", testBigTokens},
	{"ConcurrentWriters", testConcurrentWriters},
	{"NamedTable", testNamedTable},
}
