package member

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/fsm"
)

// rememberedFile, in the data dir, holds the cluster features this member has seen switched
// on in its applied log (fsm.Features, decimal). The switch is one-way, so a member that
// restarts offers what it saw at once, before raft has replayed its log up to the switch:
// otherwise every client connection made in that window (seconds after a kill, longer after
// a whole-cluster restart) would be latch/1 for its whole life, and its keep-alives would
// fail. Only the offer comes from it; a leader applies an extend only when its own applied
// log has the switch (cluster.Node.Extend).
const rememberedFile = "features"

// rememberEvery is how often the member compares its applied features with the file.
const rememberEvery = time.Second

// remembered is the features of rememberedFile.
type remembered struct {
	path string
	log  hclog.Logger
	bits atomic.Uint32
}

// loadRemembered reads dir's rememberedFile (none: no feature). Bits this latch does not know
// are dropped: it cannot offer them.
func loadRemembered(dir string, log hclog.Logger) (*remembered, error) {
	r := &remembered{path: filepath.Join(dir, rememberedFile), log: log}
	b, err := os.ReadFile(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("--data-dir: reading %s: %w", r.path, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--data-dir: %s holds %q, not the number of a feature set: remove the file (it is rewritten once the log is replayed)", r.path, strings.TrimSpace(string(b)))
	}
	r.bits.Store(uint32(fsm.Features(v) & fsm.KnownFeatures))
	return r, nil
}

// get is the features remembered.
func (r *remembered) get() fsm.Features { return fsm.Features(r.bits.Load()) }

// watch compares applied (the member's applied features) with the file every rememberEvery
// until ctx ends, and writes the file when a feature was switched on that it lacks.
func (r *remembered) watch(ctx context.Context, applied func() fsm.Features) {
	t := time.NewTicker(rememberEvery)
	defer t.Stop()
	failing := "" // the error last logged: a write that keeps failing (a full disk) is said once
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := applied() | r.get()
		if now == r.get() {
			continue
		}
		if err := r.write(now); err != nil {
			if err.Error() != failing {
				failing = err.Error()
				r.log.Warn("could not remember the cluster's features in the data dir; a restart offers them only once the log is replayed (tried again every second, said again only if the error changes)", "error", err)
			}
			continue
		}
		failing = ""
		r.bits.Store(uint32(now))
		r.log.Info("cluster features remembered in the data dir", "features", now.String())
	}
}

// write replaces the file with f, durably: a temporary file, fsync, rename, fsync of dir.
func (r *remembered) write(f fsm.Features) error {
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(uint64(f), 10)+"\n"), 0o600); err != nil {
		_ = os.Remove(tmp) // a full disk may have left part of it
		return err
	}
	fh, err := os.Open(tmp)
	if err == nil {
		err = fh.Sync()
		fh.Close()
	}
	if err == nil {
		err = os.Rename(tmp, r.path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(r.path)); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	return err
}
