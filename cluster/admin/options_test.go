package admin

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/clustertest"
)

// A single-mode node offers lock inspection unless its --http is reachable beyond loopback
// with no operator credential; then it says why in its log.
func TestLocalOptionsGateLockInspection(t *testing.T) {
	node, err := cluster.NewNode(cluster.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	operator := Credentials{AdminSecrets: [][]byte{[]byte("admin-secret-0123456789abcdef01234")}}
	for _, c := range []struct {
		name     string
		http     string
		cred     Credentials
		insecure bool
		locks    bool
	}{
		{"loopback", "127.0.0.1:7402", Credentials{}, false, true},
		{"open, no credential", "0.0.0.0:7402", Credentials{}, false, false},
		{"open, operator credential", "0.0.0.0:7402", operator, false, true},
		{"open, insecure", "0.0.0.0:7402", Credentials{}, true, true},
	} {
		var buf clustertest.Buffer
		log := hclog.New(&hclog.LoggerOptions{Output: &buf})
		o := LocalOptions(node, "boot-1", c.cred, c.http, c.insecure, log)
		if (o.Locks != nil) != c.locks {
			t.Errorf("%s: lock inspection %v, want %v", c.name, o.Locks != nil, c.locks)
		}
		if warned := strings.Contains(buf.String(), "lock inspection and forced release"); warned == c.locks {
			t.Errorf("%s: warning logged %v with inspection %v:\n%s", c.name, warned, c.locks, buf.String())
		}
		if o.Verifier == nil || o.Status == nil || o.Cluster != nil {
			t.Errorf("%s: options %+v, want a verifier and a status, no cluster", c.name, o)
		}
	}
}
