package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/latchd/latch/client/fence"
)

// pg is a PostgreSQL server started from the Debian package's binaries: trust auth, no fsync.
var pg sharedDB

// postgresSpec finds the newest /usr/lib/postgresql/N/bin with initdb and postgres (or the
// directory of initdb on PATH).
func postgresSpec() (dbSpec, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, bin := range dirs {
		if isExec(filepath.Join(bin, "initdb")) && isExec(filepath.Join(bin, "postgres")) {
			return dbSpec{
				name: "postgres", bin: bin, driver: "pgx", adminDB: "postgres",
				dsnf: "postgres://postgres@127.0.0.1:%d/%s?sslmode=disable",
				initdb: func(data string) *exec.Cmd {
					return exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
				},
				server: func(dir, data string, port int) *exec.Cmd {
					return exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
						"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
				},
				ready: 30 * time.Second, stopSig: syscall.SIGINT, grace: 15 * time.Second,
			}, nil
		}
	}
	return dbSpec{}, errors.New("no PostgreSQL server binaries (initdb and postgres in /usr/lib/postgresql/*/bin or on PATH); apt-get install postgresql")
}

// postgres returns the package's PostgreSQL server, starting it on first use; TestMain stops
// it. Without the binaries the test is skipped, saying why, except under CI=true, where CI
// installs them and a skip would hide a broken setup.
func postgres(t *testing.T) *dbServer {
	t.Helper()
	return pg.get(t, postgresSpec, true)
}

func TestPostgreSQL(t *testing.T) {
	srv := postgres(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			db, _ := srv.newDatabase(t)
			sc.run(t, newStore(t, db, fence.PostgreSQL))
		})
	}
	t.Run("WaiterSeesCommittedMark", func(t *testing.T) {
		db, _ := srv.newDatabase(t)
		testWaiter(t, newStore(t, db, fence.PostgreSQL))
	})
}

// A writer that arrives while another holds the fence row waits for it, then judges its
// token against what that one committed, or against the old mark if it rolled back.
func testWaiter(t *testing.T, s *store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.write(ctx, "reports", 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		first, second uint64
		commit        bool
		stale         bool
	}{
		{7, 6, true, true},   // 7 commits first: 6 is refused, seen 7
		{9, 8, false, false}, // 9 rolls back: 8 is judged against 7, accepted
	} {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.fences.Check(ctx, tx, "reports", c.first); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := s.write(ctx, "reports", c.second, "second"); done <- err }()
		waitForLockWait(t, s.db)
		if c.commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		err = <-done
		switch {
		case c.stale:
			mustStale(t, err, c.second, c.first)
		case err != nil:
			t.Fatalf("token %d after %d rolled back: %v, want accepted", c.second, c.first, err)
		}
	}
	s.mustMark(t, "reports", 8)
}

// waitForLockWait waits until some session of the database waits for a row lock.
func waitForLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the second writer did not wait for the fence row's lock within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
