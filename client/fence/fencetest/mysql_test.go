package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver

	"github.com/latchd/latch/client/fence"
)

// The MySQL dialect against a MariaDB server started from the Debian package's binaries
// (mariadb-server), when they are present. CI does not install them, so there this test
// skips, saying so; the PostgreSQL and SQLite tests are the ones CI always runs.

var my struct {
	once sync.Once
	srv  *myServer
	err  error
	skip string
	dbs  int
	mu   sync.Mutex
}

type myServer struct {
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

func firstExec(paths ...string) string {
	for _, p := range paths {
		if isExec(p) {
			return p
		}
	}
	return ""
}

func mariadb(t *testing.T) *myServer {
	t.Helper()
	my.once.Do(func() {
		server := firstExec("/usr/sbin/mariadbd", "/usr/sbin/mysqld")
		install := firstExec("/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db")
		if server == "" || install == "" {
			my.skip = "no MariaDB server binaries (/usr/sbin/mariadbd, /usr/bin/mariadb-install-db); apt-get install mariadb-server to test the MySQL dialect"
			return
		}
		my.srv, my.err = startMariaDB(install, server)
	})
	if my.skip != "" {
		t.Skip(my.skip)
	}
	if my.err != nil {
		t.Fatal(my.err)
	}
	return my.srv
}

func stopMariaDB() {
	if my.srv != nil {
		my.srv.stop()
	}
}

func startMariaDB(install, server string) (*myServer, error) {
	dir, err := os.MkdirTemp("", "fencetest-my-")
	if err != nil {
		return nil, err
	}
	s := &myServer{dir: dir, exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "mariadb.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	data := filepath.Join(dir, "data")
	initdb := exec.Command(install, "--no-defaults", "--datadir="+data, "--auth-root-authentication-method=normal", "--skip-test-db")
	initdb.Dir, initdb.Stdout, initdb.Stderr = dir, logf, logf
	if err := runAs(initdb, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := initdb.Run(); err != nil {
		return nil, s.fail(fmt.Errorf("mariadb-install-db: %w", err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, s.fail(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.cmd = exec.Command(server, "--no-defaults", "--datadir="+data, "--socket="+filepath.Join(dir, "mysql.sock"),
		"--port="+strconv.Itoa(s.port), "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-log-bin",
		"--pid-file="+filepath.Join(dir, "mariadb.pid"), "--innodb-flush-log-at-trx-commit=0")
	s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = dir, logf, logf
	runAs(s.cmd, dir)
	if err := s.cmd.Start(); err != nil {
		return nil, s.fail(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	db, err := sql.Open("mysql", s.dsn(""))
	if err != nil {
		s.stop()
		return nil, err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, s.fail(errors.New("mariadbd exited before it took connections"))
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("mariadbd took no connection within 60 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *myServer) dsn(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", s.port, db)
}

func (s *myServer) fail(err error) error {
	log, _ := os.ReadFile(filepath.Join(s.dir, "mariadb.log"))
	os.RemoveAll(s.dir)
	return fmt.Errorf("%w\nmariadb log:\n%s", err, log)
}

func (s *myServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	os.RemoveAll(s.dir)
}

func (s *myServer) newDatabase(t *testing.T) *sql.DB {
	t.Helper()
	my.mu.Lock()
	my.dbs++
	name := fmt.Sprintf("fencetest_%d", my.dbs)
	my.mu.Unlock()
	admin, err := sql.Open("mysql", s.dsn(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.dsn(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Every scenario on MariaDB (InnoDB, its default REPEATABLE READ), and resource names that
// MySQL's default collations would confuse stay apart.
func TestMySQL(t *testing.T) {
	srv := mariadb(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, newStore(t, srv.newDatabase(t), fence.MySQL))
		})
	}
	t.Run("ExactResourceNames", func(t *testing.T) {
		s := newStore(t, srv.newDatabase(t), fence.MySQL)
		ctx := context.Background()
		if _, err := s.write(ctx, "Jobs", 50, "by 50"); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"jobs", "Jobs ", "JOBS"} {
			if _, err := s.write(ctx, name, 10, "by 10"); err != nil {
				t.Fatalf("%q token 10 after \"Jobs\" took 50: %v, want its own mark", name, err)
			}
		}
		s.mustMark(t, "Jobs", 50)
	})
}
