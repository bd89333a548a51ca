package release_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/deploy/release"
)

const root = "../.." // the repository, from this package

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{"v0.4.0": true, "v1.20.3": true, "v1.0.0-rc.1": true,
		"": false, "0.4.0": false, "v0.4": false, "v01.2.3": false, "v0.4.0-3-gabcdef0-dirty ": false, "dev": false} {
		if err := release.CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q): %v", v, err)
		}
	}
}

// The release's notes are its CHANGELOG section; a release without one is refused, saying
// how to add it.
func TestChangelogSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "CHANGELOG.md")
	doc := "# Changelog\n\n## Unreleased\n\n- next\n\n## v0.4.0 (2026-12-04)\n\n### Added\n\n- one\n\n## v0.3.0\n\n- old\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := release.ChangelogSection(path, "v0.4.0"); err != nil || got != "### Added\n\n- one\n" {
		t.Errorf("section v0.4.0: %q, %v", got, err)
	}
	if got, err := release.ChangelogSection(path, "v0.3.0"); err != nil || got != "- old\n" {
		t.Errorf("section v0.3.0: %q, %v", got, err)
	}
	_, err := release.ChangelogSection(path, "v0.4.1")
	if err == nil || !strings.Contains(err.Error(), `no section "## v0.4.1"`) || !strings.Contains(err.Error(), "Unreleased") {
		t.Errorf("no section: %v", err)
	}
	// The repository's own changelog has no section for a version never released.
	if _, err := release.ChangelogSection(filepath.Join(root, "docs", "CHANGELOG.md"), "v999.0.0"); err == nil {
		t.Error("docs/CHANGELOG.md has a section for v999.0.0")
	}
}

// The release's manifests name its image and nothing else: both k8s overlays rendered with
// the tag, and compose with it as the default and no build section.
func TestStampManifests(t *testing.T) {
	out := t.TempDir()
	names, err := release.StampManifests(filepath.Join(root, "deploy"), out, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"latch-v1.2.3-k8s-three.yaml", "latch-v1.2.3-k8s-five.yaml", "latch-v1.2.3-compose.yaml"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("names %v, want %v", names, want)
	}
	for _, n := range names[:2] {
		b, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		images := 0
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var o struct {
				Kind string
				Spec struct {
					Template struct {
						Spec struct{ Containers, InitContainers []struct{ Image string } }
					}
				}
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			for _, c := range append(o.Spec.Template.Spec.Containers, o.Spec.Template.Spec.InitContainers...) {
				images++
				if c.Image != release.Image+":v1.2.3" {
					t.Errorf("%s: %s image %s, want %s:v1.2.3", n, o.Kind, c.Image, release.Image)
				}
			}
		}
		if images == 0 {
			t.Errorf("%s names no image", n)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, names[2]))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]map[string]any
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	if len(compose.Services) != 3 {
		t.Fatalf("compose: services %v", compose.Services)
	}
	for name, s := range compose.Services {
		if s["image"] != release.Image+":${LATCH_VERSION:-v1.2.3}" || s["build"] != nil {
			t.Errorf("compose service %s: image %v, build %v", name, s["image"], s["build"])
		}
	}
	// The repository's own manifests stay at dev, for a checkout's image (make image).
	src, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "compose.yaml"))
	if err != nil || !strings.Contains(string(src), release.Image+":${LATCH_VERSION:-dev}") {
		t.Errorf("deploy/compose/compose.yaml does not default to the dev image (%v)", err)
	}
	if _, err := release.StampCompose("services: {}\n", "v1.2.3"); err == nil {
		t.Error("StampCompose of a file it does not know: no error")
	}
}

// Two release builds of one commit are byte for byte the same binary: the second in a
// fresh build cache, so that nothing of the first is reused. The linux/amd64 binary says
// the version given and the commit's date. Slow (two builds of latch): skipped with -short.
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("two release builds of latch (about a minute): skipped with -short")
	}
	if _, err := exec.LookPath("git"); err != nil {
		clustertest.SkipUnlessCI(t, "no git: the release is built from a git checkout")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	commit, _, err := release.HeadCommit(ctx, root)
	if err != nil {
		clustertest.SkipUnlessCI(t, fmt.Sprintf("not a git checkout git can read: %v", err))
	}
	const version, platform = "v0.0.0-repro", "linux/amd64"
	changelog := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte("## "+version+"\n\n- a release of the test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(t.TempDir(), "dist")
	names, err := release.Run(ctx, release.Options{Version: version, Root: root, Out: first, Changelog: changelog,
		Platforms: []string{platform}, Images: release.ImagesSkip})
	if err != nil {
		t.Fatal(err)
	}
	bin := release.BinaryName(version, platform)
	if names[0] != bin || names[len(names)-1] != release.SumsFile {
		t.Fatalf("artifacts %v", names)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		check := exec.Command("sha256sum", "--strict", "-c", release.SumsFile)
		check.Dir = first
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c %s: %v\n%s", release.SumsFile, err, out)
		}
	}

	second := t.TempDir()
	t.Setenv("GOCACHE", t.TempDir())
	if _, err := release.BuildBinary(ctx, root, second, version, commit, platform); err != nil {
		t.Fatal(err)
	}
	a, err := release.FileSHA256(filepath.Join(first, bin))
	if err != nil {
		t.Fatal(err)
	}
	b, err := release.FileSHA256(filepath.Join(second, bin))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two builds of %s differ: %s and %s", bin, a, b)
	}

	if runtime.GOOS+"/"+runtime.GOARCH != platform {
		t.Logf("not running the %s binary on %s/%s", platform, runtime.GOOS, runtime.GOARCH)
		return
	}
	out, err := exec.Command(filepath.Join(first, bin), "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Version, Revision, Date string }
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatalf("latch version --json: %q: %v", out, err)
	}
	if got.Version != version || got.Revision != commit.Revision || got.Date != commit.Date() {
		t.Errorf("latch version: %+v, want %s, %s, %s", got, version, commit.Revision, commit.Date())
	}
	if gitDate, err := exec.Command("git", "-C", root, "log", "-1", "--format=%cI", "HEAD").Output(); err != nil {
		t.Fatal(err)
	} else if d, err := time.Parse(time.RFC3339, strings.TrimSpace(string(gitDate))); err != nil || !d.Equal(commit.Time) {
		t.Errorf("the build date %s is not the commit's time %s (%v)", got.Date, gitDate, err)
	}
}

// Without docker buildx the image is skipped with a line saying so (IMAGES=auto), or fails
// the release (require, push); skip never looks.
func TestImageWithoutBuildx(t *testing.T) {
	if exec.Command("docker", "buildx", "version").Run() == nil {
		t.Skip("docker buildx is installed here")
	}
	ctx, c := context.Background(), release.Commit{Revision: "abc", Time: time.Unix(0, 0)}
	var log strings.Builder
	if names, err := release.BuildImage(ctx, root, t.TempDir(), "v1.2.3", c, release.ImagesAuto, &log); err != nil || names != nil {
		t.Errorf("auto: %v, %v", names, err)
	}
	if !strings.Contains(log.String(), "image: skipped: no docker buildx") {
		t.Errorf("auto says %q", log.String())
	}
	for _, m := range []release.ImageMode{release.ImagesRequire, release.ImagesPush} {
		if _, err := release.BuildImage(ctx, root, t.TempDir(), "v1.2.3", c, m, &log); err == nil || !strings.Contains(err.Error(), "no docker buildx") {
			t.Errorf("%s: %v", m, err)
		}
	}
	log.Reset()
	if names, err := release.BuildImage(ctx, root, t.TempDir(), "v1.2.3", c, release.ImagesSkip, &log); err != nil || names != nil || !strings.Contains(log.String(), "skipped") {
		t.Errorf("skip: %v, %v, %q", names, err, log.String())
	}
}
