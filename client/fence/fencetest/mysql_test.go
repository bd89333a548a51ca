package fencetest

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver

	"github.com/latchd/latch/client/fence"
)

// The MySQL dialect against a MariaDB server started from the Debian package's binaries
// (mariadb-server), when they are present. CI does not install them, so there this test
// skips, saying so; the PostgreSQL and SQLite tests are the ones CI always runs.

var my sharedDB

func firstExec(paths ...string) string {
	for _, p := range paths {
		if isExec(p) {
			return p
		}
	}
	return ""
}

// mariadbSpec finds the server and its install program.
func mariadbSpec() (dbSpec, error) {
	server := firstExec("/usr/sbin/mariadbd", "/usr/sbin/mysqld")
	install := firstExec("/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db")
	if server == "" || install == "" {
		return dbSpec{}, errors.New("no MariaDB server binaries (/usr/sbin/mariadbd, /usr/bin/mariadb-install-db); apt-get install mariadb-server to test the MySQL dialect")
	}
	return dbSpec{
		name: "mariadb", bin: filepath.Dir(server), driver: "mysql", adminDB: "",
		dsnf: "root@tcp(127.0.0.1:%d)/%s",
		initdb: func(data string) *exec.Cmd {
			return exec.Command(install, "--no-defaults", "--datadir="+data, "--auth-root-authentication-method=normal", "--skip-test-db")
		},
		server: func(dir, data string, port int) *exec.Cmd {
			return exec.Command(server, "--no-defaults", "--datadir="+data, "--socket="+filepath.Join(dir, "mysql.sock"),
				"--port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-log-bin",
				"--pid-file="+filepath.Join(dir, "mariadb.pid"), "--innodb-flush-log-at-trx-commit=0")
		},
		ready: 60 * time.Second, stopSig: syscall.SIGTERM, grace: 30 * time.Second,
	}, nil
}

// mariadb returns the package's MariaDB server, starting it on first use; TestMain stops it.
// Without the binaries the test is skipped, saying why (CI does not install them).
func mariadb(t *testing.T) *dbServer {
	t.Helper()
	return my.get(t, mariadbSpec, false)
}

// Every scenario on MariaDB (InnoDB, its default REPEATABLE READ), and resource names that
// MySQL's default collations would confuse stay apart.
func TestMySQL(t *testing.T) {
	srv := mariadb(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			db, _ := srv.newDatabase(t)
			sc.run(t, newStore(t, db, fence.MySQL))
		})
	}
	t.Run("ExactResourceNames", func(t *testing.T) {
		db, _ := srv.newDatabase(t)
		s := newStore(t, db, fence.MySQL)
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
