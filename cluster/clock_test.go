package cluster

import (
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// newFakeClock is the node tests' clock: timers run inside Advance.
func newFakeClock() *clustertest.FakeClock { return clustertest.NewFakeClock(time.Unix(1_000_000, 0)) }
