package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/latchd/latch/fsm"
)

// Backup and restore over HTTP (both need the operator's credential, auth.go):
//
//	GET  /v1/snapshot                  200: the backup (application/octet-stream, the FSM's
//	                                   snapshot format), described by the X-Latch-Snapshot-*
//	                                   headers
//	POST /v1/restore?token_floor=N     body: a backup; 200: the outcome as JSON
//
// Both are served by any node and done on the leader. token_floor is required, so that an
// operator decides it (0 is allowed, explicitly): tokens issued after the backup was taken
// are the trap, since fenced resources have seen them.

// Headers describing a backup.
const (
	HeaderSnapshotIndex     = "X-Latch-Snapshot-Index"
	HeaderSnapshotLastToken = "X-Latch-Snapshot-Last-Token"
	HeaderSnapshotKeys      = "X-Latch-Snapshot-Keys"
)

func snapshots(mux *http.ServeMux, c Cluster, v *Verifier) {
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(w, r, v, Operator); !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), transferTimeout)
		defer cancel()
		var buf bytes.Buffer
		info, err := c.Backup(ctx, &buf)
		if err != nil {
			writeErr(w, opStatus("snapshot", err), fmt.Errorf("backup: %w", err))
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(buf.Len()))
		h.Set(HeaderSnapshotIndex, strconv.FormatUint(info.Index, 10))
		h.Set(HeaderSnapshotLastToken, strconv.FormatUint(uint64(info.LastToken), 10))
		h.Set(HeaderSnapshotKeys, strconv.Itoa(info.Keys))
		w.WriteHeader(http.StatusOK)
		w.Write(buf.Bytes())
	})
	receiving := make(chan struct{}, 1)
	mux.HandleFunc("POST /v1/restore", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("token_floor")
		floor, err := strconv.ParseUint(q, 10, 64)
		if err != nil || floor > uint64(fsm.MaxToken) {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("restore: token_floor %q: give a number 0..%d (see deploy/README.md on choosing it)", q, uint64(fsm.MaxToken)))
			return
		}
		// Before a byte of up to 1 GiB is read: the credential must pass (from the headers:
		// the signature covers the body's digest), the size must fit, and only one restore
		// body is held at a time. The body is then checked against the signed digest as it
		// is read, and nothing is applied if it does not match.
		if _, ok := authorize(w, r, v, Operator); !ok {
			return
		}
		if r.ContentLength > MaxSnapshot {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("restore: backup larger than %d bytes", MaxSnapshot))
			return
		}
		select {
		case receiving <- struct{}{}:
			defer func() { <-receiving }()
		default:
			writeErr(w, http.StatusServiceUnavailable, errors.New("restore: another restore is being received by this node; wait for it to finish"))
			return
		}
		data, ok := readBody(w, r, MaxSnapshot)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), transferTimeout)
		defer cancel()
		res, err := c.Restore(ctx, data, floor)
		if err != nil {
			writeChangeErr(w, fmt.Errorf("restore: %w", err), "latch status (last token, keys)")
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
}
