package admin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/prometheus/client_golang/prometheus"
)

// fakePeer serves one admin-channel call on loopback with answer (nil: read the request and
// its payload, then close without answering).
func fakePeer(t *testing.T, answer []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		if _, err := br.ReadBytes('\n'); err != nil {
			return
		}
		io.CopyN(io.Discard, br, 4) // the payload of the test's restore
		if answer != nil {
			nc.Write(append(answer, '\n'))
		}
	}()
	return ln.Addr().String()
}

// A forwarded restore whose outcome the follower cannot know (no answer after it was sent,
// or the leader saying its outcome is unknown) is Indeterminate; a refusal is not.
func TestForwardedRestoreOutcome(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer []byte
		maybe  bool
	}{
		{"no answer after the request was sent", nil, true},
		{"the leader does not know", []byte(`{"error":"raftnode: restore: outcome unknown","maybe_applied":true}`), true},
		{"the leader refused", []byte(`{"error":"raftnode: this node is not the established leader"}`), false},
	} {
		addr := fakePeer(t, c.answer)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = CallRestore(ctx, conn, []byte("data"), 7)
		cancel()
		if err == nil || errors.Is(err, outcome.Indeterminate) != c.maybe {
			t.Errorf("%s: %v; maybe applied = %v, want %v", c.name, err, errors.Is(err, outcome.Indeterminate), c.maybe)
		}
	}
}

// unknownOutcome is a cluster whose changes all end with their outcome unknown: a real one
// cannot be made to do that on demand.
type unknownOutcome struct{ Cluster }

var errUnknown = fmt.Errorf("raftnode: %w", outcome.Indeterminate)

func (unknownOutcome) Restore(context.Context, []byte, uint64) (raftnode.Restored, error) {
	return raftnode.Restored{}, errUnknown
}
func (unknownOutcome) AddMember(context.Context, string, string, bool) error { return errUnknown }
func (unknownOutcome) RemoveMember(context.Context, string) error            { return errUnknown }

// A restore or membership change whose outcome is unknown answers 504 (outcome.StatusIndeterminate)
// with what to check first, so that a client does not take it for "not applied, retry".
func TestChangeOutcomeUnknownIs504(t *testing.T) {
	h := Handler(prometheus.NewRegistry(), func() error { return nil }, Options{Cluster: unknownOutcome{}})
	for _, c := range []struct {
		method, path, body, check string
	}{
		{http.MethodPost, "/v1/restore?token_floor=1", "backup bytes", "latch status"},
		{http.MethodPost, "/v1/peers", `{"id":"n4","addr":"127.0.0.1:1","nonvoter":true}`, "latch peers list"},
		{http.MethodDelete, "/v1/peers/n4", "", "latch peers list"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, cliRequest(c.method, c.path, bytes.NewReader([]byte(c.body))))
		if rec.Code != outcome.StatusIndeterminate || !bytes.Contains(rec.Body.Bytes(), []byte(c.check)) {
			t.Errorf("%s %s with an unknown outcome: %d %s", c.method, c.path, rec.Code, rec.Body.String())
		}
	}
}
