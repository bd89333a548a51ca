package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/wire"
)

// Lock is one key as GET /v1/locks and /v1/locks/show report it.
type Lock struct {
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// Token and LeaseLeft are the holder's (absent when free): its fencing token and the
	// seconds its lease has left as the leader counts them.
	Token     uint64  `json:"token,omitempty"`
	LeaseLeft float64 `json:"lease_left_seconds,omitempty"`
	// Releasing: a release or an expiry of the holder is in the log.
	Releasing bool `json:"releasing,omitempty"`
	Waiters   int  `json:"waiters"`
}

// LockPage is one page of GET /v1/locks: held keys in byte order after the query's after.
type LockPage struct {
	Locks []Lock `json:"locks"`
	// Next is the after of the next page; absent on the last.
	Next string `json:"next,omitempty"`
	// Held is the number of held keys in all.
	Held int `json:"held"`
}

// ReleaseRequest is the body of POST /v1/locks/release: free key, held by token (0: by
// whichever token holds it).
type ReleaseRequest struct {
	Key   string `json:"key"`
	Token uint64 `json:"token,omitempty"`
}

// Released is the answer to a forced release: the token it freed.
type Released struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

// Locks is what the lock endpoints need of a node: the leader's view of its keys, read
// linearizably (a node that may have been deposed never answers), and a forced release
// through the log. LocalLocks is a node's own; in cluster mode cluster/member wraps it to
// forward to the leader.
type Locks interface {
	List(ctx context.Context, prefix, after string, limit int) (LockPage, error)
	Show(ctx context.Context, key string) (Lock, error)
	Release(ctx context.Context, key string, token uint64) (uint64, error)
}

// ErrNotHeld marks a forced release of a key that is free or held by another token (409).
var ErrNotHeld = cluster.ErrNotHeld

// DefaultLocksPage is the page size of GET /v1/locks without limit.
const DefaultLocksPage = 100

// LocalLocks is Locks on this node's lock node: it answers where the node decides (single
// mode, the leader), and with an error of outcome NotLeader elsewhere.
type LocalLocks struct{ Node *cluster.Node }

func (l LocalLocks) List(ctx context.Context, prefix, after string, limit int) (LockPage, error) {
	p, err := await(ctx, outcome.Unavailable, func(done func(cluster.LocksPage, error)) { l.Node.Locks(prefix, after, limit, done) })
	if err != nil {
		return LockPage{}, err
	}
	out := LockPage{Locks: make([]Lock, len(p.Locks)), Next: p.Next, Held: p.Held}
	for i, li := range p.Locks {
		out.Locks[i] = lockOf(li)
	}
	return out, nil
}

func (l LocalLocks) Show(ctx context.Context, key string) (Lock, error) {
	li, err := await(ctx, outcome.Unavailable, func(done func(cluster.LockInfo, error)) { l.Node.Lock(key, done) })
	return lockOf(li), err
}

func (l LocalLocks) Release(ctx context.Context, key string, token uint64) (uint64, error) {
	// Past the deadline the release may be in the log: its fate is unknown here.
	// The audit trail names ctx's caller (the operator's address, credential, relaying node).
	by := CallerOf(ctx).operator()
	return await(ctx, outcome.Indeterminate, func(done func(uint64, error)) { l.Node.ForceReleaseBy([]byte(key), token, by, done) })
}

// await starts a node call that answers through done (with the node's mutex held, so done
// must not block) and waits for its answer until ctx ends, which is then an error of kind late.
func await[T any](ctx context.Context, late outcome.Kind, call func(done func(T, error))) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	call(func(v T, err error) { ch <- res{v, err} })
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, outcome.New(late, fmt.Errorf("no answer before the deadline: %w", ctx.Err()))
	}
}

func lockOf(li cluster.LockInfo) Lock {
	return Lock{Key: li.Key, Held: li.Held, Token: li.Token, LeaseLeft: li.LeaseLeft.Seconds(), Releasing: li.Releasing, Waiters: li.Waiters}
}

// locks adds /v1/locks to mux. Every call needs the operator's credential: the reads show key
// names, which nothing else on --http reveals, and a forced release breaks a lock.
func locks(mux *http.ServeMux, l Locks, v *Verifier) {
	mux.HandleFunc("GET /v1/locks", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(w, r, v, Operator); !ok {
			return
		}
		q := r.URL.Query()
		limit := DefaultLocksPage
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > cluster.MaxLocksPage {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("admin: limit %q: want 1..%d", s, cluster.MaxLocksPage))
				return
			}
			limit = n
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		p, err := l.List(ctx, q.Get("prefix"), q.Get("after"), limit)
		writeRead(w, p, err)
	})
	mux.HandleFunc("GET /v1/locks/show", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(w, r, v, Operator); !ok {
			return
		}
		key := r.URL.Query().Get("key")
		if err := wire.CheckKey([]byte(key)); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("admin: key %q: %w", key, err))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		lk, err := l.Show(ctx, key)
		writeRead(w, lk, err)
	})
	mux.HandleFunc("POST /v1/locks/release", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authorize(w, r, v, Operator); !ok {
			return
		}
		body, ok := readBody(w, r, maxBody)
		if !ok {
			return
		}
		var req ReleaseRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeErr(w, http.StatusBadRequest, errors.New(`admin: want {"key": KEY, "token": TOKEN (optional)}`))
			return
		}
		if err := wire.CheckKey([]byte(req.Key)); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("admin: key %q: %w", req.Key, err))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		tok, err := l.Release(ctx, req.Key, req.Token)
		if err != nil {
			writeChangeErr(w, err, "latch locks show "+strconv.Quote(req.Key))
			return
		}
		writeJSON(w, http.StatusOK, Released{Key: req.Key, Token: tok})
	})
}

// writeRead answers a read with v, or with err and its status (statusOf; 503: not the
// leader, or it could not confirm that it still leads; ask again).
func writeRead(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// EachLock calls fn with every held key that starts with prefix, in key order, at most limit
// of them (0: all), fetching pages of MaxLocksPage from GET /v1/locks (signed with secret,
// when set); each page has callTimeout. It stops at fn's first error and returns it.
func (a Remote) EachLock(ctx context.Context, prefix string, limit int, secret []byte, fn func(Lock) error) error {
	after, listed := "", 0
	for {
		n := cluster.MaxLocksPage
		if limit > 0 {
			n = min(n, limit-listed)
		}
		q := url.Values{"limit": {strconv.Itoa(n)}}
		if prefix != "" {
			q.Set("prefix", prefix)
		}
		if after != "" {
			q.Set("after", after)
		}
		pctx, cancel := context.WithTimeout(ctx, callTimeout)
		var page LockPage
		err := a.Call(pctx, http.MethodGet, "/v1/locks?"+q.Encode(), nil, secret, &page)
		cancel()
		if err != nil {
			return err
		}
		for _, lk := range page.Locks {
			if err := fn(lk); err != nil {
				return err
			}
		}
		listed += len(page.Locks)
		if after = page.Next; after == "" || limit > 0 && listed >= limit {
			return nil
		}
	}
}

// ShowLock asks GET /v1/locks/show for key.
func (a Remote) ShowLock(ctx context.Context, key string, secret []byte) (Lock, error) {
	var lk Lock
	err := a.Call(ctx, http.MethodGet, "/v1/locks/show?key="+url.QueryEscape(key), nil, secret, &lk)
	return lk, err
}

// ReleaseLock frees key (held by token; 0: by whichever token holds it) through POST
// /v1/locks/release and returns the token it freed. A refusal because that token does not
// hold the key is a *StatusError with Code 409.
func (a Remote) ReleaseLock(ctx context.Context, key string, token uint64, secret []byte) (uint64, error) {
	body, err := json.Marshal(ReleaseRequest{Key: key, Token: token})
	if err != nil {
		return 0, err
	}
	var out Released
	err = a.Call(ctx, http.MethodPost, "/v1/locks/release", body, secret, &out)
	return out.Token, err
}
