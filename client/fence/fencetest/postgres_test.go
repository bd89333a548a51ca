package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/latchd/latch/client/fence"
)

// pgServer is a PostgreSQL server this test process started from the Debian package's
// binaries, in a temporary directory, on a loopback port: trust auth, no fsync.
type pgServer struct {
	bin    string // the directory of initdb and postgres
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

var pg struct {
	once sync.Once
	srv  *pgServer
	err  error
	skip string
	dbs  atomic.Int64
}

// postgresBin finds the newest /usr/lib/postgresql/N/bin with initdb and postgres (or the
// directory of initdb on PATH).
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb and postgres in /usr/lib/postgresql/*/bin or on PATH); apt-get install postgresql")
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// postgres returns the package's PostgreSQL server, starting it on first use; stopPostgres
// (from TestMain) stops it. Without the binaries the test is skipped, saying why, except
// under CI=true, where CI installs them and a skip would hide a broken setup.
func postgres(t *testing.T) *pgServer {
	t.Helper()
	pg.once.Do(func() {
		bin, err := postgresBin()
		if err != nil {
			pg.skip = err.Error()
			return
		}
		pg.srv, pg.err = startPostgres(bin)
	})
	switch {
	case pg.skip != "" && os.Getenv("CI") == "true":
		t.Fatalf("CI=true: %s (.ci/run installs it)", pg.skip)
	case pg.skip != "":
		t.Skip(pg.skip)
	case pg.err != nil:
		t.Fatal(pg.err)
	}
	return pg.srv
}

func stopPostgres() {
	if pg.srv != nil {
		pg.srv.stop()
	}
}

// runAs runs postgres's programs as nobody when this process is root: PostgreSQL refuses to
// run as root.
func runAs(cmd *exec.Cmd, dir string) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return fmt.Errorf("running as root, PostgreSQL needs an unprivileged user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return nil
}

func startPostgres(bin string) (*pgServer, error) {
	// Not t.TempDir: its parents are root's and 0700, and nobody must reach this one.
	dir, err := os.MkdirTemp("", "fencetest-pg-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, dir: dir, exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.Dir, initdb.Stdout, initdb.Stderr = dir, logf, logf
	if err := runAs(initdb, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := initdb.Run(); err != nil {
		return nil, s.fail(fmt.Errorf("initdb: %w", err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, s.fail(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(s.port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = dir, logf, logf
	runAs(s.cmd, dir)
	if err := s.cmd.Start(); err != nil {
		return nil, s.fail(fmt.Errorf("postgres: %w", err))
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	if err := s.awaitReady(30 * time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *pgServer) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

func (s *pgServer) awaitReady(within time.Duration) error {
	db, err := sql.Open("pgx", s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		select {
		case <-s.exited:
			return s.fail(errors.New("postgres exited before it took connections"))
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return s.fail(fmt.Errorf("postgres took no connection within %v: %w", within, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fail returns err with the server's log, and removes its directory.
func (s *pgServer) fail(err error) error {
	log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	os.RemoveAll(s.dir)
	return fmt.Errorf("%w\npostgres log:\n%s", err, log)
}

// stop asks for a fast shutdown (SIGINT), kills after 15 s, and removes the directory.
func (s *pgServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	os.RemoveAll(s.dir)
}

// newDatabase creates a fresh database on the server and opens it.
func (s *pgServer) newDatabase(t *testing.T) (*sql.DB, string) {
	t.Helper()
	name := fmt.Sprintf("fencetest_%d", pg.dbs.Add(1))
	admin, err := sql.Open("pgx", s.dsn("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", s.dsn(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, s.dsn(name)
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
