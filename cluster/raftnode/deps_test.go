package raftnode

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the package's dependency edges true: of latch's own packages it
// imports only fsm, cluster/ratelog and cluster/outcome (with wire, which outcome maps to).
// In particular never package cluster (cluster/member wires the two together).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const self = "github.com/latchd/latch/cluster/raftnode"
	allowed := map[string]bool{
		"github.com/latchd/latch/fsm":             true,
		"github.com/latchd/latch/cluster/ratelog": true,
		"github.com/latchd/latch/cluster/outcome": true,
		"github.com/latchd/latch/wire":            true,
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/latchd/latch/") && p != self && !allowed[p] {
			t.Errorf("raftnode depends on %s; of latch's packages it may import only fsm, cluster/ratelog, cluster/outcome and wire", p)
		}
	}
}
