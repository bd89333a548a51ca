package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
)

// The admin verbs' side of backups (snapshot.go serves them): fetch one and check it, keep
// it in a file, send one back.

// ErrBadBackup is Backup's error for a backup that arrived but does not verify (its CRC-32C
// or its format): nothing should be written.
var ErrBadBackup = errors.New("admin: the backup received does not verify, nothing written")

// Backup fetches a consistent backup through the node (taken on the leader) and verifies it.
// Its errors are Call's, or ErrBadBackup.
func (a Remote) Backup(ctx context.Context, secret []byte) ([]byte, fsm.SnapshotInfo, error) {
	_, data, err := a.Do(ctx, http.MethodGet, "/v1/snapshot", nil, secret, MaxSnapshot+1)
	if err != nil {
		return nil, fsm.SnapshotInfo{}, err
	}
	info, err := fsm.InspectSnapshot(bytes.NewReader(data))
	if err != nil {
		return nil, info, fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	return data, info, nil
}

// Restore replaces the cluster's whole state with the backup data; the next token is above
// the largest of the backup's, floor and the cluster's current one. Its errors are Call's.
func (a Remote) Restore(ctx context.Context, data []byte, floor uint64, secret []byte) (raftnode.Restored, error) {
	var res raftnode.Restored
	err := a.Call(ctx, http.MethodPost, "/v1/restore?token_floor="+strconv.FormatUint(floor, 10), data, secret, &res)
	return res, err
}

// ReadBackup reads the backup in file and verifies it; its errors name the file.
func ReadBackup(file string) ([]byte, fsm.SnapshotInfo, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fsm.SnapshotInfo{}, err
	}
	info, err := fsm.InspectSnapshot(bytes.NewReader(data))
	if err != nil {
		return nil, info, fmt.Errorf("%s: %w", file, err)
	}
	return data, info, nil
}

// WriteBackup writes data to file.tmp, syncs it and renames it to file, so that file is
// either the old one or the whole backup; then it syncs the directory.
func WriteBackup(file string, data []byte) error {
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
