package release

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The repository's own manifests name the image ghcr.io/latchd/latch:dev (a checkout's,
// built with make image); a release ships copies that name its own image instead.

// Overlays are the kustomizations under deploy/k8s rendered into a release, each to
// latch-VERSION-k8s-NAME.yaml.
var Overlays = []string{"three", "five"}

// StampManifests writes the release's manifests into out and returns their names: each
// overlay of deploy/k8s (deployDir/k8s) rendered with kustomize with the image set to
// Image:version, and deploy/compose/compose.yaml with that image as its default and
// without its build section.
func StampManifests(deployDir, out, version string) ([]string, error) {
	var names []string
	for _, o := range Overlays {
		y, err := RenderK8s(filepath.Join(deployDir, "k8s"), "overlays/"+o, version)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("latch-%s-k8s-%s.yaml", version, o)
		head := fmt.Sprintf("# latch %s: deploy/k8s/overlays/%s rendered with the image %s:%s.\n"+
			"# Create the Secrets first (deploy/README.md, 3.2), then: kubectl apply -f %s\n", version, o, Image, version, name)
		if err := os.WriteFile(filepath.Join(out, name), append([]byte(head), y...), 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	src, err := os.ReadFile(filepath.Join(deployDir, "compose", "compose.yaml"))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	c, err := StampCompose(string(src), version)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("latch-%s-compose.yaml", version)
	if err := os.WriteFile(filepath.Join(out, name), []byte(c), 0o644); err != nil {
		return nil, err
	}
	return append(names, name), nil
}

// RenderK8s renders the kustomization dir (relative to k8sDir, like "overlays/three") as
// `kubectl apply -k` would, with the latch image's tag set to version, and returns the
// YAML. The tree is copied into memory, where a kustomization beside it sets the tag: the
// checkout is never written.
func RenderK8s(k8sDir, dir, version string) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(k8sDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(k8sDir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/k8s", rel), b)
	})
	if err != nil {
		return nil, fmt.Errorf("release: copy %s: %w", k8sDir, err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../%s\nimages:\n  - name: %s\n    newTag: %s\n",
		dir, Image, version)
	if err := mem.WriteFile("/k8s/release/kustomization.yaml", []byte(k)); err != nil {
		return nil, err
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/k8s/release")
	if err != nil {
		return nil, fmt.Errorf("release: kustomize build %s: %w", dir, err)
	}
	return rm.AsYaml()
}

// composeEdits are the changes from the repository's compose.yaml to a release's: each old
// text must be there exactly once (a test renders the file, so a change to compose.yaml
// that breaks one shows there); {{version}} stands for the version.
var composeEdits = []struct{ old, new string }{
	{"# A three-node latch cluster on one Docker host, for trying latch out and for tests.\n",
		"# A three-node latch cluster on one Docker host, for trying latch out: latch {{version}}'s\n" +
			"# copy of deploy/compose/compose.yaml, with the image ghcr.io/latchd/latch:{{version}}.\n"},
	{"#      cd deploy/compose\n", ""},
	{"# 2. Start, build the image on first use (the repository root is the build context):\n" +
		"#\n" +
		"#      docker compose up -d --build\n" +
		"#\n" +
		"#    The image is ghcr.io/latchd/latch:${LATCH_VERSION:-dev}. To run a released one\n" +
		"#    instead of building: LATCH_VERSION=v0.3.0 docker compose up -d --pull always --no-build\n",
		"# 2. Start (the image is pulled on first use):\n" +
			"#\n" +
			"#      docker compose -f latch-{{version}}-compose.yaml up -d\n" +
			"#\n" +
			"#    The image is ghcr.io/latchd/latch:${LATCH_VERSION:-{{version}}}.\n"},
	{"  image: ghcr.io/latchd/latch:${LATCH_VERSION:-dev}\n" +
		"  build:\n" +
		"    context: ../..\n" +
		"    dockerfile: deploy/container/Dockerfile\n" +
		"    args:\n" +
		"      VERSION: ${LATCH_VERSION:-dev}\n",
		"  image: ghcr.io/latchd/latch:${LATCH_VERSION:-{{version}}}\n"},
}

// StampCompose turns the repository's compose.yaml (src) into the release's for version.
func StampCompose(src, version string) (string, error) {
	for _, e := range composeEdits {
		if n := strings.Count(src, e.old); n != 1 {
			return "", fmt.Errorf("release: deploy/compose/compose.yaml has %d copies of %q, want 1: update release.composeEdits with it", n, e.old)
		}
		src = strings.Replace(src, e.old, strings.ReplaceAll(e.new, "{{version}}", version), 1)
	}
	return src, nil
}
