package fencetest

import (
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, so `make test` needs nothing else

	"github.com/latchd/latch/client/fence"
)

// sqliteDSN is a database file as the writers open it: WAL, a busy timeout for the writers
// that wait for the write lock, and txlock (immediate or deferred) for BEGIN.
func sqliteDSN(path, txlock string) string {
	return "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=" + txlock
}

func openSQLite(t *testing.T, path, txlock string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path, txlock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Every scenario on SQLite, with BEGIN IMMEDIATE and with plain (deferred) BEGIN: Check is
// the transaction's first statement and a write, so both serialize the writers.
func TestSQLite(t *testing.T) {
	for _, txlock := range []string{"immediate", "deferred"} {
		for _, sc := range scenarios {
			t.Run(txlock+"/"+sc.name, func(t *testing.T) {
				db := openSQLite(t, filepath.Join(t.TempDir(), "fence.db"), txlock)
				sc.run(t, newStore(t, db, fence.SQLite))
			})
		}
	}
}
