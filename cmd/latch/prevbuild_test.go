package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/latchd/latch/cluster/clustertest"
)

// The previous build: the latch binary of another git revision, for the tests that run a
// cluster of two builds (mixed_test.go). The project's rule is that a change to the log
// format or the wire is tested against the previous build before it lands; with no release
// tags yet, the previous build is a git revision.

// prevRevEnv names the environment variable that picks the previous build's revision (any
// git revision: a hash, a tag, HEAD~3); without it the tests use prevRevDefault.
const prevRevEnv = "LATCH_PREV_REV"

// prevRevDefault is 653a820 ("cluster tests: the lazy-expiry grant test runs with and
// without timed-out waiters ..."), the last commit before promised.json (a5c0403), the
// Raft RPC filter (d98f5e9), the admin Host and Origin checks (49459c1) and the wire
// revision 2 codec (c6e3b37): the build every node ran before those changes.
const prevRevDefault = "653a820"

// prevVersionPrefix starts the version the previous build is stamped with (stampFlags),
// followed by its short hash: its "latch serving" line says which build a node runs.
const prevVersionPrefix = "v0.0.0-prev-"

// prevBuild is the one build of the previous revision per test process.
var prevBuild struct {
	once    sync.Once
	bin     string // the binary, when built or found in the cache
	version string // what it was stamped with
	skip    string // why there is none here (no git, no such revision)
	err     error  // the build failed
}

// prevLatch returns the path of the previous build's latch binary (LATCH_PREV_REV, default
// prevRevDefault) and the version it reports, building it on first use. The binary is cached
// under os.TempDir by the revision's full hash, so later runs reuse it. Without git or the
// revision (a source tarball without history) the test is skipped, saying why; under CI=true
// it fails instead. A failed build fails the test.
func prevLatch(t *testing.T) (bin, version string) {
	t.Helper()
	prevBuild.once.Do(func() {
		rev := os.Getenv(prevRevEnv)
		if rev == "" {
			rev = prevRevDefault
		}
		prevBuild.bin, prevBuild.version, prevBuild.skip, prevBuild.err = buildPrev(rev)
	})
	switch {
	case prevBuild.skip != "":
		clustertest.SkipUnlessCI(t, prevBuild.skip)
	case prevBuild.err != nil:
		t.Fatalf("building the previous latch: %v", prevBuild.err)
	}
	return prevBuild.bin, prevBuild.version
}

// buildPrev resolves rev in the repository holding this module, and returns the cached
// binary of that commit or builds it: git archive of the commit, unpacked into a temporary
// directory, go build there (the module cache is shared, so nothing is fetched that this
// build did not need, bar dependencies the old revision had and this one dropped). skip says
// why it cannot be done here; err is a build that failed.
func buildPrev(rev string) (bin, version, skip string, err error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", "", "the previous build is built from git history, and git is not installed", nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/latchd/latch").Output()
	if err != nil {
		return "", "", "", fmt.Errorf("find the latch module: %w", err)
	}
	root := strings.TrimSpace(string(out))
	out, err = exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Sprintf("no git revision %q in %s (%s=REV picks another; a clone without that history or a source tarball has none): %v",
			rev, root, prevRevEnv, err), nil
	}
	hash := strings.TrimSpace(string(out))
	version = prevVersionPrefix + hash[:12]
	dir := filepath.Join(os.TempDir(), "latch-prev-"+hash)
	bin = filepath.Join(dir, "latch")
	if got, err := exec.Command(bin, "version").Output(); err == nil && strings.SplitN(string(got), "\n", 2)[0] == "latch "+version {
		return bin, version, "", nil // built by an earlier run
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", err
	}
	src, err := os.MkdirTemp("", "latch-prev-src-")
	if err != nil {
		return "", "", "", err
	}
	defer os.RemoveAll(src)
	if err := gitArchive(root, hash, src); err != nil {
		return "", "", "", err
	}
	// Built next to the cached path, then renamed: a concurrent run or an interrupted build
	// never leaves a partial binary where the next run looks.
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	build := exec.Command("go", "build", "-ldflags", stampFlags(version, hash, "unknown"), "-o", tmp, "./cmd/latch")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", "", "", fmt.Errorf("go build of %s: %v\n%s", hash, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", "", "", err
	}
	return bin, version, "", nil
}

// gitArchive writes the tree of commit hash of the repository at root into dir (git archive,
// unpacked here: nothing in the repository changes, no worktree is registered).
func gitArchive(root, hash, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", hash)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	r, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	uerr := untar(r, dir)
	io.Copy(io.Discard, r)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", hash, err, stderr.String())
	}
	return uerr
}

// untar unpacks the directories, files and symbolic links of a tar stream into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFileFrom(path, tr, h.FileInfo().Mode().Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, path)
		} // git archive writes nothing else but its comment header (pax global)
		if err != nil {
			return err
		}
	}
}

func writeFileFrom(path string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o200)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// serverFlags are the flags of `BIN server` (from its --help), once per binary.
var serverFlags sync.Map // bin -> map[string]bool

var helpFlag = regexp.MustCompile(`(?m)^\s+--([a-z0-9][a-z0-9-]*)`)

// checkServerFlags fails the test unless every flag in args (--name or --name=value) is one
// bin's server command has: a flag this build added must never reach an older node, where it
// would stop the start (urfave/cli refuses unknown flags) or be read as something else.
func checkServerFlags(t *testing.T, bin string, args []string) {
	t.Helper()
	known, ok := serverFlags.Load(bin)
	if !ok {
		out, err := exec.Command(bin, "server", "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s server --help: %v\n%s", bin, err, out)
		}
		m := map[string]bool{}
		for _, f := range helpFlag.FindAllStringSubmatch(string(out), -1) {
			m[f[1]] = true
		}
		if len(m) < 10 {
			t.Fatalf("%s server --help lists %d flags; is it latch?\n%s", bin, len(m), out)
		}
		known, _ = serverFlags.LoadOrStore(bin, m)
	}
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !known.(map[string]bool)[name] {
			t.Fatalf("%s has no server flag --%s: the harness must not pass it to a node of that build", bin, name)
		}
	}
}
