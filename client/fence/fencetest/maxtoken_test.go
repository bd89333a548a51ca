package fencetest

import (
	"testing"

	"github.com/latchd/latch/client/fence"
	"github.com/latchd/latch/wire"
)

// fence keeps its own copy of the largest token (it imports nothing of latch); this module,
// which may import both, ties it to the protocol's.
func TestFenceMaxTokenIsTheProtocols(t *testing.T) {
	if fence.MaxToken != wire.MaxToken {
		t.Fatalf("fence.MaxToken = %d, wire.MaxToken = %d: they must be equal", fence.MaxToken, wire.MaxToken)
	}
}
