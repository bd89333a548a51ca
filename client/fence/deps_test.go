package fence

import (
	"os/exec"
	"strings"
	"testing"
)

// The package is linked by resources written in any style: it must pull in nothing but the
// standard library (the database drivers are the caller's, and this module's tests of them
// live in the nested module fencetest).
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/latchd/latch/client/fence" {
			t.Errorf("client/fence depends on %s; it may use the standard library only", p)
		}
	}
}
