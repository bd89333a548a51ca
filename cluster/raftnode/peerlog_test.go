package raftnode

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's per-heartbeat failure lines for a down peer become one line when it goes down and
// one when it answers again; other lines pass, with raft.Server values as text.
func TestPeerLogOncePerStateChange(t *testing.T) {
	var buf bytes.Buffer
	pl := newPeerLog(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace, JSONFormat: true}))
	pl.st.addrOf = func(id string) string {
		if id == "n2" {
			return "10.0.0.2:7401"
		}
		return ""
	}
	var l hclog.Logger = pl.Named("replication")
	down := errors.New("dial tcp 10.0.0.2:7401: connection refused")
	for range 200 {
		l.Error("failed to heartbeat to", "peer", raft.ServerAddress("10.0.0.2:7401"), "backoff time", 10, "error", down)
		l.Error("failed to appendEntries to", "peer", raft.Server{ID: "n2", Address: "10.0.0.2:7401"}, "error", down)
		l.Warn("failed to contact", "server-id", raft.ServerID("n2"), "time", 5)
	}
	l.Info("updating configuration", "server", raft.Server{ID: "n3", Address: "10.0.0.3:7401"})
	pl.st.resumed("n2", "10.0.0.2:7401")
	l.Error("failed to heartbeat to", "peer", raft.ServerAddress("10.0.0.2:7401"), "error", down)

	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines for 600 failures, a resume and a new failure; want 4 (down, configuration, up, down):\n%s", len(lines), out)
	}
	for i, want := range []string{"cannot reach peer", "updating configuration", "peer reachable again", "cannot reach peer"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q lacks %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[1], `"server":"n3 (10.0.0.3:7401)"`) || strings.Contains(out, "Suffrage") {
		t.Errorf("a raft.Server is logged as a struct:\n%s", out)
	}
	if !strings.Contains(lines[2], `"failures":600`) {
		t.Errorf("the resume line does not count the 600 failures: %s", lines[2])
	}
}
