// Package fencetest holds the tests of package fence against real databases and real latch
// processes; it has no code of its own to import. It is a module of its own so that the
// database drivers stay out of latch's module: SQLite through modernc.org/sqlite (pure
// Go, always run), and PostgreSQL through pgx against a server the tests start from the
// Debian package's binaries (/usr/lib/postgresql/*/bin) in a temporary directory (skipped
// with the reason when they are missing, and a failure under CI=true). The MySQL dialect
// runs against MariaDB where its Debian binaries are installed, and is skipped otherwise.
//
// e2e_test.go races two `latch run` holders of one key, the first paused past its lease;
// docs_test.go follows docs/fencing.md (its statements, and its psql example under latch run).
package fencetest
