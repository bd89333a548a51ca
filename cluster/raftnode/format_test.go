package raftnode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A start records the format and the version in format.json; a directory without the file
// (from a latch before it) starts and gets one; a directory of a newer format is refused by
// Open and by Inspect with one line that names the version that wrote it and leaves it as
// it was; a damaged record is a broken directory.
func TestDataDirFormat(t *testing.T) {
	version := "v1.0.0"
	c := newCluster(t, 1, func(cfg *Config) { cfg.Version = version })
	tn := c.leader()
	grant(t, tn.n, "k")
	c.shutdown(tn)
	path := filepath.Join(tn.dir, formatFile)
	wantFile := func(want string) {
		t.Helper()
		if raw, err := os.ReadFile(path); err != nil || string(raw) != want+"\n" {
			t.Fatalf("%s: %q (%v), want %q", formatFile, raw, err, want)
		}
	}
	wantFile(`{"format":1,"written_by":"v1.0.0"}`)

	if err := os.Remove(path); err != nil { // as a latch before format.json left it
		t.Fatal(err)
	}
	version = "v1.1.0"
	c.restart(tn)
	c.leader()
	c.shutdown(tn)
	wantFile(`{"format":1,"written_by":"v1.1.0"}`)

	open := func() error {
		tr := c.transport(tn.addr)
		n, err := Open(c.config(tn, tr, false))
		if err == nil {
			tn.n = n
			c.shutdown(tn)
			return nil
		}
		_ = tr.Close()
		return err
	}
	newer := `{"format":2,"written_by":"v2.0.0","later":"ignored"}`
	if err := os.WriteFile(path, []byte(newer+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "data dir " + tn.dir + " was written by latch v2.0.0 with format 2; this latch reads format ≤ 1: run v2.0.0 or newer, or restore a backup"
	for what, err := range map[string]error{"Open": open(), "Inspect": func() error { _, err := Inspect(tn.dir, nil); return err }()} {
		if !errors.Is(err, ErrDataDirNewer) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s of a newer format: %v, want ErrDataDirNewer saying %q", what, err, want)
		}
	}
	wantFile(newer)

	if err := os.WriteFile(path, []byte("{\"format\":\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantBroken(t, open(), tn.dir, formatFile)
}
