package raftnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The data directory's format: which latch wrote it, and whether this one can read it.
//
// format.json, beside raft.db, holds a format number and the version of the latch that last
// started on the directory. The format number names everything a latch must understand to
// start from the directory: the stores (wal/, raft.db, snapshots/), promised.json, and the
// log entries and snapshots fsm writes. Only a major version may raise it (README,
// "Versions and compatibility"); a minor version may add to the directory only what the
// previous minor reads or ignores, without raising it.
//
// Every start (Open, and Inspect and Recover, which read the directory offline) reads the
// file first and refuses, before it opens anything, a directory of a format higher than
// dataDirFormat: an older latch never half-reads what a newer one wrote. A directory without
// the file is format 1 (every latch before the file was), and Open writes the file (a
// temporary file, fsynced, renamed, the directory fsynced) once the directory has passed its
// start checks, when its content would change. A latch from before the file ignores it, so
// its written_by may name a newer latch than the one that last ran there; the format number
// stays true, since those builds all write format 1.

// formatFile is the name of the format record in the data directory.
const formatFile = "format.json"

// dataDirFormat is the highest data directory format this latch reads, and the one it writes.
const dataDirFormat = 1

// ErrDataDirNewer: the data directory was written in a format this latch cannot read (a
// newer latch ran on it). Errors wrapping it name the version that wrote it and the way out:
// run that version or a newer one, or restore a backup into an empty directory.
var ErrDataDirNewer = errors.New("raftnode: the data directory is of a newer format")

// dirFormat is the content of format.json. Fields a later minor version adds are ignored.
type dirFormat struct {
	Format    int    `json:"format"`
	WrittenBy string `json:"written_by"` // the latch version that last started on the directory
}

// readFormat returns dir's format record; a directory without one is format 1, written by
// a latch from before the file ("before format.json").
func readFormat(dir string) (dirFormat, error) {
	path := filepath.Join(dir, formatFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return dirFormat{Format: 1, WrittenBy: "before " + formatFile}, nil
	}
	if err != nil {
		return dirFormat{}, fmt.Errorf("raftnode: read %s: %w", path, err)
	}
	var f dirFormat
	if err := json.Unmarshal(raw, &f); err != nil || f.Format < 1 {
		if err == nil {
			err = fmt.Errorf("format %d", f.Format)
		}
		return dirFormat{}, broken(dir, path+" is damaged", err)
	}
	return f, nil
}

// checkFormat refuses (ErrDataDirNewer) a directory this latch cannot read.
func checkFormat(dir string) (dirFormat, error) {
	f, err := readFormat(dir)
	if err != nil {
		return f, err
	}
	if f.Format > dataDirFormat {
		return f, fmt.Errorf("%w: data dir %s was written by latch %s with format %d; this latch reads format ≤ %d: run %s or newer, or restore a backup",
			ErrDataDirNewer, dir, f.WrittenBy, f.Format, dataDirFormat, f.WrittenBy)
	}
	return f, nil
}

// recordFormat writes dir's format record as this latch's (format dataDirFormat, written by
// version), durably, unless it says so already.
func recordFormat(dir string, old dirFormat, version string) error {
	if version == "" {
		version = "unknown"
	}
	f := dirFormat{Format: dataDirFormat, WrittenBy: version}
	if _, err := os.Stat(filepath.Join(dir, formatFile)); err == nil && old == f {
		return nil
	}
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return writeFileDurably(dir, formatFile, append(body, '\n'))
}
