// Package release builds a latch release from a checkout: static binaries for every
// platform, the deploy manifests stamped with the release's image, the container image for
// both Linux architectures as an OCI archive (where docker buildx is at hand), the
// release's CHANGELOG section, and SHA256SUMS over all of them. `make release
// VERSION=vX.Y.Z` runs it (deploy/cmd/release); the release workflow
// (.github/workflows/release.yml) runs that on every v* tag.
//
// A release is reproducible: the binaries depend only on the commit, the Go toolchain and
// the version (-trimpath, no VCS stamp, no build ID, a build date that is the commit's
// time, a fixed environment), so two builds of one tag are byte for byte the same, which
// TestReproducible checks. It lives in the deploy module so that the main module never
// depends on kustomize.
package release

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Platforms are the GOOS/GOARCH pairs of a release.
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// Image is the image repository releases are pushed to; its tag is the version.
const Image = "ghcr.io/latchd/latch"

// ImageMode says whether Run builds the container image.
type ImageMode string

const (
	ImagesAuto    ImageMode = "auto"    // with docker buildx; without, say why it is skipped
	ImagesRequire ImageMode = "require" // with docker buildx; without, fail
	ImagesPush    ImageMode = "push"    // as require, and push it to Image:Version too (the release workflow)
	ImagesSkip    ImageMode = "skip"    // never
)

// Options are one release build.
type Options struct {
	Version   string    // vX.Y.Z (semver with an optional pre-release): required
	Root      string    // the repository's root: the checkout built
	Out       string    // the directory the artifacts go to (emptied first): dist/
	Changelog string    // the CHANGELOG with a "## Version" section; empty: Root/docs/CHANGELOG.md
	Platforms []string  // GOOS/GOARCH pairs; empty: Platforms
	Images    ImageMode // empty: ImagesAuto
	Log       io.Writer // progress lines; nil: discarded
}

// Commit is the commit a release is built from: its hash and its committer time in UTC,
// the binaries' build date.
type Commit struct {
	Revision string
	Time     time.Time
}

// Date is the build date the binaries carry: RFC 3339 in UTC.
func (c Commit) Date() string { return c.Time.UTC().Format(time.RFC3339) }

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// CheckVersion refuses a version that is not vMAJOR.MINOR.PATCH[-PRERELEASE].
func CheckVersion(v string) error {
	if !semver.MatchString(v) {
		return fmt.Errorf("release: VERSION %q is not vMAJOR.MINOR.PATCH (like v0.4.0): run make release VERSION=vX.Y.Z", v)
	}
	return nil
}

// ChangelogSection returns the body of the "## version" section of the changelog at path
// (up to the next "## " heading), or an error saying how to add one: a release never ships
// without its entries.
func ChangelogSection(path, version string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	var body []string
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			if in {
				break
			}
			name, _, _ := strings.Cut(strings.TrimSpace(h), " ")
			in = name == version
			found = found || in
			continue
		}
		if in {
			body = append(body, line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("release: read %s: %w", path, err)
	}
	if !found {
		return "", fmt.Errorf("release: %s has no section \"## %s\": move the Unreleased entries under a heading \"## %s (YYYY-MM-DD)\", commit it, tag that commit %s, and run make release again",
			path, version, version, version)
	}
	return strings.TrimSpace(strings.Join(body, "\n")) + "\n", nil
}

// HeadCommit is the commit checked out at root, and whether the tree has changes that are
// not committed (a release should not: its binaries would not be those of the commit).
func HeadCommit(ctx context.Context, root string) (c Commit, dirty bool, err error) {
	out, err := git(ctx, root, "log", "-1", "--format=%H %ct", "HEAD")
	if err != nil {
		return c, false, err
	}
	var secs int64
	if _, err := fmt.Sscanf(out, "%s %d", &c.Revision, &secs); err != nil {
		return c, false, fmt.Errorf("release: git log: %q: %w", out, err)
	}
	c.Time = time.Unix(secs, 0).UTC()
	status, err := git(ctx, root, "status", "--porcelain", "--untracked-files=no")
	return c, status != "", err
}

func git(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("release: git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Run builds the release o describes into o.Out and returns the artifacts' names, in the
// order SHA256SUMS lists them (SHA256SUMS last).
func Run(ctx context.Context, o Options) ([]string, error) {
	if err := CheckVersion(o.Version); err != nil {
		return nil, err
	}
	if o.Root == "" || o.Out == "" {
		return nil, errors.New("release: Options.Root and Options.Out are required")
	}
	if o.Changelog == "" {
		o.Changelog = filepath.Join(o.Root, "docs", "CHANGELOG.md")
	}
	if o.Platforms == nil {
		o.Platforms = Platforms
	}
	if o.Images == "" {
		o.Images = ImagesAuto
	}
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	notes, err := ChangelogSection(o.Changelog, o.Version)
	if err != nil {
		return nil, err
	}
	commit, dirty, err := HeadCommit(ctx, o.Root)
	if err != nil {
		return nil, err
	}
	if dirty {
		fmt.Fprintf(log, "release: warning: %s has uncommitted changes; the binaries are not exactly those of %s\n", o.Root, commit.Revision)
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range o.Platforms {
		name, err := BuildBinary(ctx, o.Root, o.Out, o.Version, commit, p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "release: %s\n", name)
		names = append(names, name)
	}
	stamped, err := StampManifests(filepath.Join(o.Root, "deploy"), o.Out, o.Version)
	if err != nil {
		return nil, err
	}
	names = append(names, stamped...)
	notesName := "latch-" + o.Version + "-CHANGELOG.md"
	if err := os.WriteFile(filepath.Join(o.Out, notesName), []byte("# latch "+o.Version+"\n\n"+notes), 0o644); err != nil {
		return nil, err
	}
	names = append(names, notesName)
	img, err := BuildImage(ctx, o.Root, o.Out, o.Version, commit, o.Images, log)
	if err != nil {
		return nil, err
	}
	names = append(names, img...)
	if err := WriteSums(o.Out, names); err != nil {
		return nil, err
	}
	return append(names, SumsFile), nil
}
