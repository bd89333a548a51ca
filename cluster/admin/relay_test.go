package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
)

// failing is a node whose every change, backup and lock call fails with err: the leader at
// the far end of an admin channel.
type failing struct{ err error }

func (f failing) Members() ([]Member, error)                            { return nil, f.err }
func (f failing) AddMember(context.Context, string, string, bool) error { return f.err }
func (f failing) RemoveMember(context.Context, string) error            { return f.err }
func (f failing) Backup(context.Context, io.Writer) (fsm.SnapshotInfo, error) {
	return fsm.SnapshotInfo{}, f.err
}
func (f failing) Restore(context.Context, []byte, uint64) (raftnode.Restored, error) {
	return raftnode.Restored{}, f.err
}
func (f failing) State() (NodeState, error)                       { return NodeState{}, f.err }
func (f failing) CheckSelf(context.Context, string, string) error { return nil }
func (f failing) List(context.Context, string, string, int) (LockPage, error) {
	return LockPage{}, f.err
}
func (f failing) Show(context.Context, string) (Lock, error)              { return Lock{}, f.err }
func (f failing) Release(context.Context, string, uint64) (uint64, error) { return 0, f.err }

// forwarding is a follower: it sends every call over the admin channel at addr, as
// cluster/member forwards them to the leader, and returns what comes back.
type forwarding struct{ addr string }

func (f forwarding) conn() net.Conn {
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		panic(err) // the listener runs until the test's cleanup
	}
	return c
}

func (f forwarding) Members() ([]Member, error) { return nil, errors.New("not forwarded") }
func (f forwarding) AddMember(ctx context.Context, id, addr string, voter bool) error {
	return CallChannel(ctx, f.conn(), ChannelRequest{Op: "add", ID: id, Addr: addr, Voter: voter})
}
func (f forwarding) RemoveMember(ctx context.Context, id string) error {
	return CallChannel(ctx, f.conn(), ChannelRequest{Op: "remove", ID: id})
}
func (f forwarding) Backup(ctx context.Context, w io.Writer) (fsm.SnapshotInfo, error) {
	return CallBackup(ctx, f.conn(), w)
}
func (f forwarding) Restore(ctx context.Context, data []byte, floor uint64) (raftnode.Restored, error) {
	return CallRestore(ctx, f.conn(), data, floor)
}
func (f forwarding) State() (NodeState, error)                       { return CallState(context.Background(), f.conn()) }
func (f forwarding) CheckSelf(context.Context, string, string) error { return nil }
func (f forwarding) List(ctx context.Context, prefix, after string, limit int) (LockPage, error) {
	p, _, _, err := CallLocks(ctx, f.conn(), ChannelRequest{Op: "locks", Prefix: prefix, After: after, Limit: limit})
	return p, err
}
func (f forwarding) Show(ctx context.Context, key string) (Lock, error) {
	_, lk, _, err := CallLocks(ctx, f.conn(), ChannelRequest{Op: "lock", Key: key})
	return lk, err
}
func (f forwarding) Release(ctx context.Context, key string, token uint64) (uint64, error) {
	_, _, tok, err := CallLocks(ctx, f.conn(), ChannelRequest{Op: "force-release", Key: key, Token: token})
	return tok, err
}

// serveFailing serves the admin channel of a node whose calls fail with err, on loopback.
func serveFailing(t *testing.T, err error) string {
	t.Helper()
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { ln.Close() })
	go ServeChannel(ln, failing{err}, hclog.NewNullLogger())
	return ln.Addr().String()
}

// badBackup is the error a restore of bytes that are no backup fails with.
func badBackup(t *testing.T) error {
	t.Helper()
	_, err := fsm.ReadBackup([]byte("not a backup"))
	if err == nil || !fsm.IsBackupError(err) {
		t.Fatalf("reading a bad backup: %v, want a backup error", err)
	}
	return fmt.Errorf("raftnode: restore: %w", err)
}

// A follower answers a forwarded admin call exactly as the leader answers it itself: the
// same status and the same message, for every outcome and every admin error, on every
// endpoint that forwards; and its error has the leader's outcome.
func TestFollowerAnswersWhatTheLeaderWould(t *testing.T) {
	leaderErrs := map[string]error{
		"refused":       outcome.New(outcome.Refused, errors.New("the new member does not serve revision 2")),
		"other node":    fmt.Errorf("%w: the node at 127.0.0.1:1 is \"n1\", not \"n4\"", ErrOtherNode),
		"not held":      fmt.Errorf("%w: the key is free", ErrNotHeld),
		"not found":     fmt.Errorf("%w: \"n9\" (see latch peers list)", ErrNotFound),
		"not leader":    outcome.New(outcome.NotLeader, errors.New("this node is not the leader")),
		"unavailable":   outcome.New(outcome.Unavailable, errors.New("raftnode: node is shut down")),
		"indeterminate": outcome.New(outcome.Indeterminate, errors.New("raft did not answer within ApplyTimeout")),
		"bad backup":    badBackup(t),
		"no outcome":    errors.New("something else went wrong"),
	}
	calls := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/peers", `{"id":"n4","addr":"127.0.0.1:1"}`},
		{http.MethodDelete, "/v1/peers/n4", ""},
		{http.MethodPost, "/v1/restore?token_floor=1", "backup bytes"},
		{http.MethodGet, "/v1/snapshot", ""},
		{http.MethodGet, "/v1/locks", ""},
		{http.MethodGet, "/v1/locks/show?key=k", ""},
		{http.MethodPost, "/v1/locks/release", `{"key":"k"}`},
	}
	for name, err := range leaderErrs {
		leader := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{Cluster: failing{err}, Locks: failing{err}})
		fw := forwarding{serveFailing(t, err)}
		follower := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{Cluster: fw, Locks: fw})
		for _, c := range calls {
			answer := func(h http.Handler) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, cliRequest(c.method, c.path, bytes.NewReader([]byte(c.body))))
				return rec
			}
			want, got := answer(leader), answer(follower)
			if got.Code != want.Code || got.Body.String() != want.Body.String() || want.Code/100 != 4 && want.Code/100 != 5 {
				t.Errorf("%s, %s %s: the follower answers %d %s; the leader %d %s", name, c.method, c.path,
					got.Code, got.Body.String(), want.Code, want.Body.String())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		relayedErr := fw.AddMember(ctx, "n4", "127.0.0.1:1", true)
		cancel()
		wantKind, wantOK := outcome.Of(err)
		if k, ok := outcome.Of(relayedErr); k != wantKind || ok != wantOK {
			t.Errorf("%s: the relayed error's outcome is %v, %v; the leader's %v, %v", name, k, ok, wantKind, wantOK)
		}
		for _, sentinel := range []error{ErrNotFound, ErrNotHeld, outcome.Unavailable, outcome.Indeterminate, outcome.Refused, outcome.NotLeader} {
			if errors.Is(relayedErr, sentinel) != errors.Is(err, sentinel) {
				t.Errorf("%s: errors.Is(relayed, %v) = %v, the leader's %v", name, sentinel, !errors.Is(err, sentinel), errors.Is(err, sentinel))
			}
		}
	}
}

// channelResponseBefore is channelResponse as a latch before Status and Outcome had it: its
// error fields (the others did not change).
type channelResponseBefore struct {
	Error        string `json:"error,omitempty"`
	NotFound     bool   `json:"not_found,omitempty"`
	MaybeApplied bool   `json:"maybe_applied,omitempty"`
	NotHeld      bool   `json:"not_held,omitempty"`
}

// statusBefore is the status a follower of that latch answered an error relayed with those
// flags: 404, 504, 409, and 503 for the rest (its relayed errors carried nothing else).
func statusBefore(r channelResponseBefore) int {
	switch {
	case r.NotFound:
		return http.StatusNotFound
	case r.MaybeApplied:
		return outcome.StatusIndeterminate
	case r.NotHeld:
		return http.StatusConflict
	}
	return http.StatusServiceUnavailable
}

// Mixed versions during a rolling upgrade, both ways. What this build answers, a latch
// before Status and Outcome reads as it always did (the same flags, the same message), so its
// follower answers what it answered before. What that latch answers, this build reads as
// that latch's followers did.
func TestChannelAnswersAcrossVersions(t *testing.T) {
	for _, err := range []error{
		outcome.New(outcome.Indeterminate, errors.New("lost")),
		fmt.Errorf("%w: \"n9\"", ErrNotFound),
		fmt.Errorf("%w: the key is free", ErrNotHeld),
		outcome.New(outcome.NotLeader, errors.New("deposed")),
		outcome.New(outcome.Refused, errors.New("bad input")),
	} {
		conn, derr := net.Dial("tcp", serveFailing(t, err))
		if derr != nil {
			t.Fatal(derr)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "{\"op\":\"remove\",\"id\":\"n9\"}\n")
		line, rerr := bufio.NewReader(conn).ReadBytes('\n')
		conn.Close()
		var old channelResponseBefore
		if rerr != nil || json.Unmarshal(line, &old) != nil {
			t.Fatalf("%v: answer %q, %v", err, line, rerr)
		}
		if old.Error != err.Error() || old.NotFound != errors.Is(err, ErrNotFound) ||
			old.MaybeApplied != errors.Is(err, outcome.Indeterminate) || old.NotHeld != errors.Is(err, ErrNotHeld) {
			t.Errorf("%v: an older latch reads %+v from %s", err, old, line)
		}
	}

	for _, c := range []struct {
		answer string
		status int
		kind   outcome.Kind
	}{
		// From a latch before Status and Outcome.
		{`{"error":"raftnode: restore: outcome unknown","maybe_applied":true}`, 504, outcome.Indeterminate},
		{`{"error":"admin: no such member: \"n9\"","not_found":true}`, 404, 0},
		{`{"error":"the key is not held by that token","not_held":true}`, 409, 0},
		{`{"error":"refused (not applied): the new member does not serve revision 2"}`, 503, 0},
		// From this build, and from a later one with an outcome this one does not know.
		{`{"error":"refused (not applied): bad input","status":400,"outcome":"refused"}`, 400, outcome.Refused},
		{`{"error":"another node answers at that address","status":409}`, 409, 0},
		{`{"error":"not applied: deposed","status":503,"outcome":"not_leader"}`, 503, outcome.NotLeader},
		{`{"error":"later","status":503,"outcome":"from_a_later_latch","maybe_applied":true}`, 503, outcome.Indeterminate},
	} {
		conn, derr := net.Dial("tcp", fakePeer(t, []byte(c.answer)))
		if derr != nil {
			t.Fatal(derr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := CallRestore(ctx, conn, []byte("data"), 7) // fakePeer reads these 4 bytes
		cancel()
		var before channelResponseBefore
		json.Unmarshal([]byte(c.answer), &before)
		if k, _ := outcome.Of(err); err == nil || statusOf(err) != c.status || k != c.kind || err.Error() != before.Error {
			t.Errorf("%s: %v, status %d, outcome %v; want %d, %v", c.answer, err, statusOf(err), k, c.status, c.kind)
		}
		if before.Error != "" && !bytes.Contains([]byte(c.answer), []byte(`"status"`)) && statusOf(err) != statusBefore(before) {
			t.Errorf("%s: status %d, where that latch's follower answered %d", c.answer, statusOf(err), statusBefore(before))
		}
		if errors.Is(err, ErrNotFound) != before.NotFound || errors.Is(err, ErrNotHeld) != before.NotHeld {
			t.Errorf("%s: ErrNotFound %v, ErrNotHeld %v", c.answer, errors.Is(err, ErrNotFound), errors.Is(err, ErrNotHeld))
		}
	}
}
