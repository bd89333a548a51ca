package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Member is one member of the cluster configuration.
type Member struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Suffrage string `json:"suffrage"`
}

// Cluster is what the membership endpoints need of a cluster-mode node. The node's wiring
// (cmd/latch) implements it: on a follower, changes are forwarded to the leader.
type Cluster interface {
	Members() ([]Member, error)
	AddMember(ctx context.Context, id, addr string, voter bool) error
	RemoveMember(ctx context.Context, id string) error
}

// ErrNotFound marks a member id that is not in the configuration (HTTP 404).
var ErrNotFound = errors.New("admin: no such member")

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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// membership adds /v1/peers to mux. Mutating calls must be signed (Verifier).
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
		body, ok := verified(w, r, v)
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
		if err := c.AddMember(ctx, req.ID, req.Addr, !req.Nonvoter); err != nil {
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"added": req.ID})
	})
	mux.HandleFunc("DELETE /v1/peers/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := verified(w, r, v); !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		id := r.PathValue("id")
		if err := c.RemoveMember(ctx, id); err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, ErrNotFound) {
				code = http.StatusNotFound
			}
			writeErr(w, code, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"removed": id})
	})
}

// verified reads the body and checks its signature, answering 401 when it fails.
func verified(w http.ResponseWriter, r *http.Request, v *Verifier) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return nil, false
	}
	if err := v.Verify(r, body); err != nil {
		writeErr(w, http.StatusUnauthorized, err)
		return nil, false
	}
	return body, true
}

// ChannelRequest is a membership change forwarded to the leader over the peer port's admin
// channel (authenticated by cluster/peer, so it carries no signature of its own).
type ChannelRequest struct {
	Op    string `json:"op"` // "add" or "remove"
	ID    string `json:"id"`
	Addr  string `json:"addr,omitempty"`
	Voter bool   `json:"voter,omitempty"`
}

type channelResponse struct {
	Error    string `json:"error,omitempty"`
	NotFound bool   `json:"not_found,omitempty"`
}

// ServeChannel answers forwarded membership changes on ln (the admin channel's listener)
// with local, which must apply them on this node without forwarding again. It returns when
// ln is closed.
func ServeChannel(ln net.Listener, local Cluster, log hclog.Logger) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(callTimeout + 5*time.Second))
			var req ChannelRequest
			if err := json.NewDecoder(io.LimitReader(conn, maxBody)).Decode(&req); err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			var resp channelResponse
			switch req.Op {
			case "add":
				err = local.AddMember(ctx, req.ID, req.Addr, req.Voter)
			case "remove":
				err = local.RemoveMember(ctx, req.ID)
			default:
				err = errors.New("admin: unknown channel op " + req.Op)
			}
			if err != nil {
				resp.Error, resp.NotFound = err.Error(), errors.Is(err, ErrNotFound)
			}
			log.Info("forwarded membership change", "op", req.Op, "id", req.ID, "error", resp.Error)
			json.NewEncoder(conn).Encode(resp)
		}()
	}
}

// CallChannel sends req over conn (a dialed admin channel to the leader) and waits for the
// outcome. conn is closed when it returns.
func CallChannel(ctx context.Context, conn net.Conn, req ChannelRequest) error {
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return err
	}
	var resp channelResponse
	if err := json.NewDecoder(bufio.NewReader(io.LimitReader(conn, maxBody))).Decode(&resp); err != nil {
		return errors.New("admin: no answer from the leader: " + err.Error())
	}
	switch {
	case resp.NotFound:
		return errors.Join(ErrNotFound, errors.New(resp.Error))
	case resp.Error != "":
		return errors.New(resp.Error)
	}
	return nil
}
