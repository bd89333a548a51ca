package fencetest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dbServer is a database server this test process started from the Debian package's
// binaries, in a temporary directory, on a loopback port, with its log beside its data
// (postgres_test.go and mysql_test.go say which server and how).
type dbServer struct {
	dbSpec
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	dbs    atomic.Int64
}

// dbSpec is what one kind of server needs: its programs and arguments, how to reach it and
// how to stop it.
type dbSpec struct {
	name    string                                     // "postgres", "mariadb": names the directory, the log and its header
	bin     string                                     // the directory of its programs
	driver  string                                     // the database/sql driver
	adminDB string                                     // the database CREATE DATABASE runs in
	dsnf    string                                     // the DSN's format, of the port and the database's name
	initdb  func(data string) *exec.Cmd                // creates the data directory
	server  func(dir, data string, port int) *exec.Cmd // serves it on 127.0.0.1:port
	ready   time.Duration                              // how long it may take to take connections
	stopSig syscall.Signal                             // its fast shutdown
	grace   time.Duration                              // after which stop kills it
}

// isExec reports whether path is an executable regular file.
func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// runAs runs a server's programs as nobody when this process is root: PostgreSQL refuses to
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

// startDB creates the data directory, starts the server and waits until it takes
// connections. Its errors carry the server's log.
func startDB(spec dbSpec) (*dbServer, error) {
	// Not t.TempDir: its parents are root's and 0700, and nobody must reach this one.
	dir, err := os.MkdirTemp("", "fencetest-"+spec.name+"-")
	if err != nil {
		return nil, err
	}
	s := &dbServer{dbSpec: spec, dir: dir, exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, spec.name+".log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	data := filepath.Join(dir, "data")
	initdb := spec.initdb(data)
	initdb.Dir, initdb.Stdout, initdb.Stderr = dir, logf, logf
	if err := runAs(initdb, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := initdb.Run(); err != nil {
		return nil, s.fail(fmt.Errorf("%s: %w", filepath.Base(initdb.Path), err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, s.fail(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.cmd = spec.server(dir, data, s.port)
	s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = dir, logf, logf
	runAs(s.cmd, dir)
	if err := s.cmd.Start(); err != nil {
		return nil, s.fail(fmt.Errorf("%s: %w", filepath.Base(s.cmd.Path), err))
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	if err := s.awaitReady(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// awaitReady pings the server until it answers, it exits, or spec.ready has passed.
func (s *dbServer) awaitReady() error {
	db, err := sql.Open(s.driver, s.dsn(s.adminDB))
	if err != nil {
		return err
	}
	defer db.Close()
	prog := filepath.Base(s.cmd.Path)
	deadline := time.Now().Add(s.ready)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		select {
		case <-s.exited:
			return s.fail(fmt.Errorf("%s exited before it took connections", prog))
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return s.fail(fmt.Errorf("%s took no connection within %v: %w", prog, s.ready, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *dbServer) dsn(db string) string { return fmt.Sprintf(s.dsnf, s.port, db) }

// fail returns err with the server's log, and removes its directory.
func (s *dbServer) fail(err error) error {
	log, _ := os.ReadFile(filepath.Join(s.dir, s.name+".log"))
	os.RemoveAll(s.dir)
	return fmt.Errorf("%w\n%s log:\n%s", err, s.name, log)
}

// stop asks for a fast shutdown (spec.stopSig), kills after spec.grace, and removes the
// directory.
func (s *dbServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(s.stopSig)
		select {
		case <-s.exited:
		case <-time.After(s.grace):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	os.RemoveAll(s.dir)
}

// newDatabase creates a fresh database on the server and opens it; it returns the database
// and its DSN.
func (s *dbServer) newDatabase(t *testing.T) (*sql.DB, string) {
	t.Helper()
	name := fmt.Sprintf("fencetest_%d", s.dbs.Add(1))
	admin, err := sql.Open(s.driver, s.dsn(s.adminDB))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	dsn := s.dsn(name)
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dsn
}

// sharedDB is one server for the whole test binary, started on first use; TestMain stops it.
type sharedDB struct {
	once sync.Once
	srv  *dbServer
	err  error
	skip string // why there is no server to start
}

// get returns the server, starting it from find's spec on first use. Without the binaries
// (find's error) the test is skipped, saying why, except under CI=true when ciInstalls: CI
// installs them there, and a skip would hide a broken setup.
func (d *sharedDB) get(t *testing.T, find func() (dbSpec, error), ciInstalls bool) *dbServer {
	t.Helper()
	d.once.Do(func() {
		spec, err := find()
		if err != nil {
			d.skip = err.Error()
			return
		}
		d.srv, d.err = startDB(spec)
	})
	switch {
	case d.skip != "" && ciInstalls && os.Getenv("CI") == "true":
		t.Fatalf("CI=true: %s (.ci/run installs it)", d.skip)
	case d.skip != "":
		t.Skip(d.skip)
	case d.err != nil:
		t.Fatal(d.err)
	}
	return d.srv
}

func (d *sharedDB) stop() {
	if d.srv != nil {
		d.srv.stop()
	}
}
