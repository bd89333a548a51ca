package fencetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/latchd/latch/client/fence"
)

// The writer is the command that `latch run` starts in e2e_test.go: this test binary again,
// with these variables set (latch run passes its environment on, adding LATCH_KEY,
// LATCH_TOKEN and LATCH_DEADLINE).
const (
	writerEnv = "FENCETEST_WRITER" // a directory for the writer's files (below)
	dbEnv     = "FENCETEST_DB"     // "sqlite" or "postgresql"
	dsnEnv    = "FENCETEST_DSN"    // the database to write
	pauseEnv  = "FENCETEST_PAUSE"  // "1": a second, late write once the test says go
)

// The writer's files in its directory, each written whole (a temporary file renamed).
const (
	readyFile  = "ready"  // after the first write: writerReady
	goFile     = "go"     // made by the test: do the late write now
	resultFile = "result" // at the end: writerResult
)

type writerReady struct {
	PID      int    `json:"pid"`
	Token    uint64 `json:"token"`
	Deadline string `json:"deadline"` // LATCH_DEADLINE
}

type writerResult struct {
	Token uint64 `json:"token"`
	// Late is the outcome of the late write: "accepted", "stale" (then Seen is the token
	// the database had), or an error; empty for a writer without one.
	Late string `json:"late,omitempty"`
	Seen uint64 `json:"seen,omitempty"`
	Err  string `json:"err,omitempty"`
}

func writeJSON(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

func writerBody(token uint64, late bool) string {
	if late {
		return fmt.Sprintf("late write by token %d", token)
	}
	return fmt.Sprintf("written by token %d", token)
}

// writerMain writes the report under LATCH_TOKEN, as a job run by `latch run` would. Its
// exit code: 0 when it did what it was told (a late write refused included: the test judges
// the result file), 1 on an error, also in the result file.
func writerMain() int {
	dir := os.Getenv(writerEnv)
	res := writerResult{}
	err := writer(dir, &res)
	if err != nil {
		res.Err = err.Error()
	}
	if werr := writeJSON(dir, resultFile, res); werr != nil || err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err, werr)
		return 1
	}
	return 0
}

func writer(dir string, res *writerResult) error {
	token, err := fence.ParseToken(os.Getenv("LATCH_TOKEN"))
	if err != nil {
		return fmt.Errorf("LATCH_TOKEN: %w", err)
	}
	res.Token = token
	s, err := openWriterStore()
	if err != nil {
		return err
	}
	defer s.db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.write(ctx, "reports", token, writerBody(token, false)); err != nil {
		return fmt.Errorf("first write: %w", err)
	}
	if err := writeJSON(dir, readyFile, writerReady{PID: os.Getpid(), Token: token, Deadline: os.Getenv("LATCH_DEADLINE")}); err != nil {
		return err
	}
	if os.Getenv(pauseEnv) != "1" {
		return nil
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, goFile)); err == nil {
			break
		}
		if ctx.Err() != nil {
			return errors.New("no go from the test within 2 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = s.write(ctx, "reports", token, writerBody(token, true))
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		res.Late, res.Seen = "stale", stale.Seen
	case err != nil:
		return fmt.Errorf("late write: %w", err)
	default:
		res.Late = "accepted"
	}
	return nil
}

func openWriterStore() (*store, error) {
	var d fence.Dialect
	var driver string
	switch os.Getenv(dbEnv) {
	case "sqlite":
		d, driver = fence.SQLite, "sqlite"
	case "postgresql":
		d, driver = fence.PostgreSQL, "pgx"
	default:
		return nil, fmt.Errorf("%s=%q: want sqlite or postgresql", dbEnv, os.Getenv(dbEnv))
	}
	db, err := sql.Open(driver, os.Getenv(dsnEnv))
	if err != nil {
		return nil, err
	}
	return &store{db: db, fences: fence.Table{Dialect: d}, dialect: d}, nil
}
