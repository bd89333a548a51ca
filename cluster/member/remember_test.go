package member

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/fsm"
)

func TestRememberedFeatures(t *testing.T) {
	dir := t.TempDir()
	r, err := loadRemembered(dir, hclog.NewNullLogger())
	if err != nil || r.get() != 0 {
		t.Fatalf("no file: %v, %v; want no feature", r.get(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.watch(ctx, func() fsm.Features { return fsm.FeatureLeases }) }()
	deadline := time.Now().Add(30 * time.Second)
	for r.get() != fsm.FeatureLeases {
		if time.Now().After(deadline) {
			t.Fatal("the applied feature was not remembered within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	again, err := loadRemembered(dir, hclog.NewNullLogger())
	if err != nil || again.get() != fsm.FeatureLeases {
		t.Fatalf("reloaded: %v, %v; want leases", again.get(), err)
	}
	// Bits this latch does not know are dropped; a file that is not a number is refused.
	path := filepath.Join(dir, rememberedFile)
	if err := os.WriteFile(path, []byte("3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := loadRemembered(dir, hclog.NewNullLogger()); err != nil || r.get() != fsm.FeatureLeases {
		t.Fatalf("file 3: %v, %v; want leases only", r.get(), err)
	}
	if err := os.WriteFile(path, []byte("leases\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRemembered(dir, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "remove the file") {
		t.Fatalf("a damaged file: %v, want an error that says what to do", err)
	}
}
