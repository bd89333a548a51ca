package admin

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/outcome"
)

// A channel call whose peer closes without answering: a read changed nothing (Unavailable:
// asking again is safe), a change may have happened (Indeterminate).
func TestChannelCallWithNoAnswer(t *testing.T) {
	for op, want := range map[string]outcome.Kind{
		"locks": outcome.Unavailable, "lock": outcome.Unavailable, "state": outcome.Unavailable,
		"force-release": outcome.Indeterminate, "add": outcome.Indeterminate,
	} {
		a, b := net.Pipe()
		go func() {
			buf := make([]byte, 4096)
			b.Read(buf) // the request line
			b.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := call(ctx, a, ChannelRequest{Op: op}, nil)
		cancel()
		if got, _ := outcome.Of(err); got != want || err == nil {
			t.Errorf("%s with no answer: %v (outcome %v), want outcome %v", op, err, got, want)
		}
		if want == outcome.Unavailable && errors.Is(err, outcome.Indeterminate) {
			t.Errorf("%s: a read is never of unknown outcome: %v", op, err)
		}
	}
}
