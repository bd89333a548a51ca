package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyWireAndStdlib keeps the package's dependency edge true: the client imports
// package wire and the standard library, nothing else (no server code, no third party).
func TestImportsOnlyWireAndStdlib(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/latchd/latch/client" && p != "github.com/latchd/latch/wire" {
			t.Errorf("client depends on %s; it may import only wire and the standard library", p)
		}
	}
}
