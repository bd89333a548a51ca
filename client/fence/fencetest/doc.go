// Package fencetest holds the tests of package fence against real databases and real latch
// processes; it has no code of its own to import. It is a module of its own so that the
// database drivers stay out of latch's module: SQLite through modernc.org/sqlite (pure
// Go, always run), and PostgreSQL through pgx against a server the tests start from the
// Debian package's binaries (/usr/lib/postgresql/*/bin) in a temporary directory (skipped
// with the reason when they are missing, and a failure under CI=true).
package fencetest
