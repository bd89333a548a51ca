package logs

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

type innerConfig struct {
	HeartbeatTimeout time.Duration
	Name             string
}

// JSON log lines carry durations in seconds and structs as text, through Named and With.
func TestJSONLogDurationsInSecondsAndNoStructs(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Named("raft").With("timeout", 1500*time.Millisecond).Warn("event",
		"backoff", 250*time.Millisecond, "config", innerConfig{time.Second, "x"}, "cfgp", &innerConfig{}, "error", errors.New("boom"), "n", 3)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	for k, want := range map[string]any{"timeout": 1.5, "backoff": 0.25, "error": "boom", "n": 3.0,
		"config": "{HeartbeatTimeout:1s Name:x}", "cfgp": "&{HeartbeatTimeout:0s Name:}", "@module": "latch.raft"} {
		if line[k] != want {
			t.Errorf("%s: %#v, want %#v (line %s)", k, line[k], want, buf.String())
		}
	}
}
