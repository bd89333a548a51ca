package fencetest

import (
	"os"
	"testing"
)

// TestMain is also the entry of the writer processes of e2e_test.go: `latch run` starts this
// test binary again with writerEnv set, and it writes under LATCH_TOKEN instead of testing.
func TestMain(m *testing.M) {
	if os.Getenv(writerEnv) != "" {
		os.Exit(writerMain())
	}
	code := m.Run()
	pg.stop()
	my.stop()
	removeLatch()
	os.Exit(code)
}
