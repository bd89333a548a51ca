package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildLatch builds this repository's latch binary (./cmd/latch of module
// github.com/latchd/latch, as the calling module resolves it) into a new temporary
// directory, with the go build flags given, for the TestMain of process tests. remove
// deletes the directory. The build's output goes to stderr.
func BuildLatch(flags ...string) (bin string, remove func(), err error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/latchd/latch").Output()
	if err != nil {
		return "", nil, fmt.Errorf("find the latch module: %w", err)
	}
	root := strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("", "latch-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "latch")
	args := append(append([]string{"-C", root, "build"}, flags...), "-o", bin, "./cmd/latch")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		remove()
		return "", nil, fmt.Errorf("building latch: %w", err)
	}
	return bin, remove, nil
}

// RunWithLatch is the body of a process test package's TestMain: it builds latch
// (BuildLatch with flags), sets *bin to its path, runs the tests and removes the binary, and
// returns the exit code for os.Exit.
func RunWithLatch(m *testing.M, bin *string, flags ...string) int {
	path, remove, err := BuildLatch(flags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	*bin = path
	return m.Run()
}
