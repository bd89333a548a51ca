package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
)

// Member is one member of the cluster configuration.
type Member struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Suffrage string `json:"suffrage"`
}

// Cluster is what the membership endpoints need of a cluster-mode node. The node's wiring
// (cluster/member) implements it: on a follower, changes are forwarded to the leader.
type Cluster interface {
	Members() ([]Member, error)
	AddMember(ctx context.Context, id, addr string, voter bool) error
	RemoveMember(ctx context.Context, id string) error
	// Backup writes a consistent backup of the replicated state to w (taken on the leader).
	Backup(ctx context.Context, w io.Writer) (fsm.SnapshotInfo, error)
	// Restore replaces the replicated state with the backup data (done on the leader).
	Restore(ctx context.Context, data []byte, floor uint64) (raftnode.Restored, error)
	// State is this node's own view, for a peer deciding whether to bootstrap.
	State() (NodeState, error)
	// CheckSelf returns nil when the node that answers at addr (asked over the peer port)
	// is id: a peer credential may add or promote only the node that made the call.
	CheckSelf(ctx context.Context, id, addr string) error
}

// ErrNotFound marks a member id that is not in the configuration (HTTP 404).
var ErrNotFound = errors.New("admin: no such member")

// ErrOtherNode marks an add whose address is served by a node with another id (HTTP 409):
// check --raft-addr and --id.
var ErrOtherNode = errors.New("admin: another node answers at that address")

// AddRequest is the body of POST /v1/peers.
type AddRequest struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Nonvoter bool   `json:"nonvoter,omitempty"`
}

// maxBody bounds admin request bodies.
const maxBody = 64 << 10

// callTimeout bounds one membership change, forwarding included.
const callTimeout = 30 * time.Second

// transferTimeout bounds one backup or restore, forwarding included.
const transferTimeout = 5 * time.Minute

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// statusOf is the HTTP status of a failed admin call's err, the one table of them: the status
// the leader answered it with, when err is its answer relayed over the admin channel (a
// follower answers what the leader would); else 400 for a bad backup or floor (Refused's),
// 404 for an unknown member, 409 for another node at that address or a lock not held by
// that token; else err's outcome's (outcome.HTTPStatus: 503 unavailable, try again; 504
// indeterminate, check first: retrying could apply it twice; 400 refused; 503 when it
// carries none).
func statusOf(err error) int {
	var r *relayed
	switch {
	case errors.As(err, &r) && r.status != 0:
		return r.status
	case fsm.IsBackupError(err) || errors.Is(err, fsm.ErrFloorRange):
		return outcome.HTTPStatus(outcome.Refused)
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrOtherNode), errors.Is(err, ErrNotHeld):
		return http.StatusConflict
	}
	return outcome.HTTPStatus(err)
}

// opStatus is the status this node's endpoint for the admin channel's op answers err with: a
// failed backup ("snapshot") is 503, it changed nothing (ask again); the rest statusOf's.
func opStatus(op string, err error) int {
	if op == "snapshot" {
		return http.StatusServiceUnavailable
	}
	return statusOf(err)
}

// writeChangeErr answers a failed change (membership, restore, forced release) with its
// status (statusOf); one that is indeterminate says what to check before trying again.
func writeChangeErr(w http.ResponseWriter, err error, check string) {
	code := statusOf(err)
	if code == outcome.StatusIndeterminate {
		err = fmt.Errorf("%w; check %s before trying again", err, check)
	}
	writeErr(w, code, err)
}

// membership adds /v1/peers to mux. Listing the members is open (it shows ids and peer
// addresses, as /v1/status does); changes need the operator, or a peer adding itself.
func membership(mux *http.ServeMux, c Cluster, v *Verifier) {
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		ms, err := c.Members()
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
		writeJSON(w, http.StatusOK, ms)
	})
	mux.HandleFunc("POST /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		who, ok := authorize(w, r, v, Peer)
		if !ok {
			return
		}
		body, ok := readBody(w, r, maxBody)
		if !ok {
			return
		}
		var req AddRequest
		if err := json.Unmarshal(body, &req); err != nil || req.ID == "" || req.Addr == "" {
			writeErr(w, http.StatusBadRequest, errors.New(`admin: want {"id": ID, "addr": HOST:PORT, "nonvoter": false}`))
			return
		}
		if _, _, err := net.SplitHostPort(req.Addr); err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		if who == Peer {
			if err := c.CheckSelf(ctx, req.ID, req.Addr); err != nil {
				writeErr(w, http.StatusForbidden, fmt.Errorf("%w (%v)", ErrPeerOnly, err))
				return
			}
		}
		if err := c.AddMember(ctx, req.ID, req.Addr, !req.Nonvoter); err != nil {
			writeChangeErr(w, err, "latch peers list")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"added": req.ID})
	})
	mux.HandleFunc("DELETE /v1/peers/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(w, r, v, Operator); !ok {
			return
		}
		if _, ok := readBody(w, r, maxBody); !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		id := r.PathValue("id")
		if err := c.RemoveMember(ctx, id); err != nil {
			writeChangeErr(w, err, "latch peers list")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"removed": id})
	})
}

// authorize checks r's credential from its headers, before any of its body is read: 401 when
// it proves nothing (or fails), 403 when it proves less than need.
func authorize(w http.ResponseWriter, r *http.Request, v *Verifier, need Principal) (Principal, bool) {
	who, cred, err := v.verify(r)
	switch {
	case err != nil:
		writeErr(w, http.StatusUnauthorized, err)
		return NoOne, false
	case who < need:
		writeErr(w, http.StatusForbidden, ErrPeerOnly)
		return NoOne, false
	}
	setCred(r, cred)
	return who, true
}

// readBody reads an authorized call's body through its signed digest (VerifiedBody),
// answering 413 or 400 when it is refused.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := VerifiedBody(r, limit)
	switch {
	case errors.Is(err, ErrTooLarge):
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%w (at most %d bytes)", err, limit))
		return nil, false
	case err != nil:
		writeErr(w, http.StatusBadRequest, err)
		return nil, false
	}
	return body, true
}
