package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Dialect is the SQL database a Table speaks to: its placeholders and its atomic
// check-and-record statement.
type Dialect int

const (
	// PostgreSQL (9.5 or later): one upsert, $1 placeholders.
	PostgreSQL Dialect = iota + 1
	// SQLite (3.24 or later): the same upsert as PostgreSQL, ? placeholders.
	SQLite
	// MySQL (and MariaDB): an upsert that keeps the higher token, then a read of the mark in
	// the same transaction; ? placeholders.
	MySQL
)

// String names the dialect.
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// MaxResource is the longest resource name a Table takes, in bytes (the width of its
// resource column).
const MaxResource = 255

// DefaultTable is the name of the fence table when Table.Name is empty.
const DefaultTable = "fence"

// Table is a fence table in a SQL database: one row per resource, holding the highest token
// accepted for it.
//
//	CREATE TABLE fence (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)
//
// (VARBINARY(255) on MySQL, whose default collations ignore case and trailing spaces).
// Check runs the rule inside the caller's transaction, in the same transaction as the write
// it guards: the write and the new mark commit together or not at all. Check's statement
// locks the resource's fence row until the transaction ends, so concurrent writers of one
// resource take turns; a writer that waited sees the mark its predecessor committed. A
// rolled-back transaction leaves the mark as it was.
//
// Isolation: the databases' defaults work. PostgreSQL's READ COMMITTED makes a waiting
// writer re-check the mark its predecessor committed; at REPEATABLE READ or SERIALIZABLE it
// gets a serialization failure instead, and the whole transaction must be retried (the
// mark stays safe either way). On MySQL (InnoDB) both statements lock the row and read its
// latest version, at any level. On SQLite a write locks the whole database: set a busy
// timeout, and begin with BEGIN IMMEDIATE when the transaction reads before it calls Check
// (modernc.org/sqlite: `_txlock=immediate` in the DSN).
type Table struct {
	// Dialect is the database's (required).
	Dialect Dialect
	// Name is the table's name, DefaultTable ("fence") if empty. It may be qualified by a
	// schema (`app.fence`); letters, digits and underscores only.
	Name string
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func (t Table) name() (string, error) {
	name := t.Name
	if name == "" {
		name = DefaultTable
	}
	if !identifier.MatchString(name) {
		return "", fmt.Errorf("fence: table name %q: want letters, digits and underscores, optionally schema.table", t.Name)
	}
	switch t.Dialect {
	case PostgreSQL, SQLite, MySQL:
		return name, nil
	}
	return "", fmt.Errorf("fence: table %s: unknown dialect %v; set Table.Dialect to fence.PostgreSQL, fence.SQLite or fence.MySQL", name, t.Dialect)
}

// Statements is the SQL a Table runs; docs/fencing.md shows it for each dialect.
type Statements struct {
	// Create makes the table if it does not exist.
	Create string
	// Check records a token if it is at least the mark; it takes (resource, token), and on
	// MySQL (resource, token, token).
	Check string
	// Read reads the mark after Check, in the same transaction; it takes (resource). On
	// MySQL it always follows Check (a locking read, so that it sees the latest mark at any
	// isolation level); elsewhere only when Check changed no row, to say which token won.
	Read string
	// Mark reads the mark outside a check; it takes (resource).
	Mark string
}

// Statements returns the SQL this Table runs.
func (t Table) Statements() (Statements, error) {
	name, err := t.name()
	if err != nil {
		return Statements{}, err
	}
	s := Statements{
		Create: "CREATE TABLE IF NOT EXISTS " + name + " (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL)",
		Mark:   "SELECT token FROM " + name + " WHERE resource = ?",
	}
	switch t.Dialect {
	case PostgreSQL:
		s.Check = upsert(name, "$1, $2")
		s.Mark = "SELECT token FROM " + name + " WHERE resource = $1"
	case SQLite:
		s.Check = upsert(name, "?, ?")
	case MySQL:
		// VARBINARY: MySQL's default collations would make "Jobs" and "jobs " one resource.
		s.Create = "CREATE TABLE IF NOT EXISTS " + name + " (resource VARBINARY(255) PRIMARY KEY, token BIGINT NOT NULL)"
		s.Check = "INSERT INTO " + name + " (resource, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, ?)"
		s.Read = s.Mark + " FOR UPDATE"
		return s, nil
	}
	s.Read = s.Mark
	return s, nil
}

// upsert is the check of PostgreSQL and SQLite. Its WHERE names the table without its
// schema, as both databases call the target of an INSERT.
func upsert(name, params string) string {
	ref := name[strings.LastIndexByte(name, '.')+1:]
	return "INSERT INTO " + name + " (resource, token) VALUES (" + params + ") ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE " + ref + ".token <= excluded.token"
}

// Create makes the fence table if it does not exist.
func (t Table) Create(ctx context.Context, db *sql.DB) error {
	st, err := t.Statements()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, st.Create); err != nil {
		return fmt.Errorf("fence: create table: %w", err)
	}
	return nil
}

// Check applies the rule inside tx: if token is at least the highest token accepted for
// resource, it records token as the resource's mark (in tx) and returns nil; the caller then
// writes and commits. Otherwise it returns a *StaleError (errors.Is(err, ErrStale)) with the
// mark it saw, changes nothing, and the caller must roll back. An invalid token is
// ErrInvalidToken and nothing is sent. Any other error is the database's.
//
// Call Check before the write it guards, in the same transaction, and commit only if it
// returned nil. An equal token is accepted: the same holder writing again (two holders
// never get the same token).
func (t Table) Check(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	if err := CheckToken(token); err != nil {
		return err
	}
	if len(resource) == 0 || len(resource) > MaxResource {
		return fmt.Errorf("fence: resource name of %d bytes: want 1..%d", len(resource), MaxResource)
	}
	st, err := t.Statements()
	if err != nil {
		return err
	}
	if t.Dialect == MySQL {
		if _, err := tx.ExecContext(ctx, st.Check, resource, int64(token), int64(token)); err != nil {
			return fmt.Errorf("fence: record token %d for %q: %w", token, resource, err)
		}
		return compare(ctx, tx, st.Read, resource, token)
	}
	res, err := tx.ExecContext(ctx, st.Check, resource, int64(token))
	if err != nil {
		return fmt.Errorf("fence: record token %d for %q: %w", token, resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: record token %d for %q: rows affected: %w", token, resource, err)
	}
	if n == 1 {
		return nil
	}
	return compare(ctx, tx, st.Read, resource, token)
}

// compare reads the mark of resource in tx and says whether token is at or above it: for
// MySQL after its upsert has kept the higher of the two, for the others after the upsert
// changed nothing (then the mark is above token, or the row vanished).
func compare(ctx context.Context, tx *sql.Tx, read, resource string, token uint64) error {
	var seen int64
	err := tx.QueryRowContext(ctx, read, resource).Scan(&seen)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fence: record token %d for %q: the fence row is missing after the upsert", token, resource)
	}
	if err != nil {
		return fmt.Errorf("fence: read the mark of %q: %w", resource, err)
	}
	if seen < 0 {
		return fmt.Errorf("fence: the mark of %q is %d, below 0: something other than this package wrote the fence table", resource, seen)
	}
	if uint64(seen) > token {
		return &StaleError{Resource: resource, Token: token, Seen: uint64(seen)}
	}
	if uint64(seen) < token {
		return fmt.Errorf("fence: record token %d for %q: the mark is still %d after the upsert", token, resource, seen)
	}
	return nil
}

// Querier is what Mark reads through: *sql.DB, *sql.Tx and *sql.Conn.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Mark returns the highest token accepted for resource, and false if none has been.
func (t Table) Mark(ctx context.Context, q Querier, resource string) (uint64, bool, error) {
	st, err := t.Statements()
	if err != nil {
		return 0, false, err
	}
	var seen int64
	err = q.QueryRowContext(ctx, st.Mark, resource).Scan(&seen)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("fence: read the mark of %q: %w", resource, err)
	}
	return uint64(seen), true, nil
}
