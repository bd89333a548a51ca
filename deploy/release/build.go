package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// buildInfoPkg is where the binary's version, revision and date are set (cluster/buildinfo).
const buildInfoPkg = "github.com/latchd/latch/cluster/buildinfo"

// BinaryName is the file name of the release binary for platform (GOOS/GOARCH):
// latch-v1.2.3-linux-amd64.
func BinaryName(version, platform string) string {
	return "latch-" + version + "-" + strings.ReplaceAll(platform, "/", "-")
}

// BuildFlags are the go build arguments of a release binary: no cgo (so it is static),
// -trimpath (no build paths), no VCS stamp and no build ID, symbols stripped, and the
// version, revision and date set in cluster/buildinfo.
func BuildFlags(version string, c Commit) []string {
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.version=%s -X %s.revision=%s -X %s.date=%s",
		buildInfoPkg, version, buildInfoPkg, c.Revision, buildInfoPkg, c.Date())
	return []string{"build", "-trimpath", "-buildvcs=false", "-mod=readonly", "-ldflags", ldflags}
}

// buildEnv is the environment of a release build: the caller's, with everything that could
// change the bytes of the binary fixed (GOFLAGS, the architecture levels, cgo, the
// workspace), and the target platform.
func buildEnv(goos, goarch string) []string {
	fixed := map[string]string{
		"CGO_ENABLED": "0", "GOOS": goos, "GOARCH": goarch, "GOFLAGS": "", "GOWORK": "off",
		"GOAMD64": "v1", "GOARM64": "v8.0", "GOEXPERIMENT": "",
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !has(fixed, k) {
			env = append(env, kv)
		}
	}
	for k, v := range fixed {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

func has(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// BuildBinary builds ./cmd/latch of the checkout at root for platform into out and returns
// the file's name (BinaryName).
func BuildBinary(ctx context.Context, root, out, version string, c Commit, platform string) (string, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok {
		return "", fmt.Errorf("release: platform %q is not GOOS/GOARCH", platform)
	}
	name := BinaryName(version, platform)
	abs, err := filepath.Abs(filepath.Join(out, name))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", append(BuildFlags(version, c), "-o", abs, "./cmd/latch")...)
	cmd.Dir, cmd.Env = root, buildEnv(goos, goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("release: go build for %s: %v\n%s", platform, err, b)
	}
	return name, nil
}

// SumsFile is the checksum file of a release, in the format of sha256sum.
const SumsFile = "SHA256SUMS"

// FileSHA256 is the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WriteSums writes dir/SHA256SUMS: one "HASH  NAME" line per file in names, sorted by name,
// which `sha256sum -c SHA256SUMS` checks.
func WriteSums(dir string, names []string) error {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	var b strings.Builder
	for _, n := range sorted {
		sum, err := FileSHA256(filepath.Join(dir, n))
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}
