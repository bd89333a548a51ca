package clustertest

import (
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Logger returns an hclog logger whose lines go to t.Log until the test's cleanups run.
// After that it drops them: goroutines that wind down late (raft's, a session's) may still
// log, and t.Log after the end of a test panics. Call it before registering the cleanups
// that stop those goroutines, so that it is silenced last.
func Logger(t testing.TB, name string, level hclog.Level) hclog.Logger {
	w := &writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: w})
}

type writer struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
