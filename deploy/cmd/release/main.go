// Command release builds a latch release into a directory (make release VERSION=vX.Y.Z
// builds it and runs it from the repository's root): see package
// github.com/latchd/latch/deploy/release. It exits 1 on any failure, with one line saying
// what to do.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/latchd/latch/deploy/release"
)

func main() {
	var o release.Options
	var platforms, images string
	flag.StringVar(&o.Version, "version", "", "the release's version, vX.Y.Z (the git tag)")
	flag.StringVar(&o.Root, "root", ".", "the repository checkout to build")
	flag.StringVar(&o.Out, "out", "dist", "the directory for the artifacts (emptied first)")
	flag.StringVar(&o.Changelog, "changelog", "", "the changelog with a \"## VERSION\" section (default ROOT/docs/CHANGELOG.md)")
	flag.StringVar(&platforms, "platforms", strings.Join(release.Platforms, " "), "GOOS/GOARCH pairs of the binaries, space-separated")
	flag.StringVar(&images, "images", string(release.ImagesAuto), "the container image: auto (with docker buildx, else skipped), require, push (require, and push it), or skip")
	flag.Parse()
	o.Platforms = strings.Fields(platforms)
	o.Images = release.ImageMode(images)
	o.Log = os.Stderr
	if m := o.Images; m != release.ImagesAuto && m != release.ImagesRequire && m != release.ImagesPush && m != release.ImagesSkip {
		fmt.Fprintf(os.Stderr, "release: -images %q: want auto, require, push or skip\n", m)
		os.Exit(2)
	}
	names, err := release.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "release %s: %d files in %s (%s)\n", o.Version, len(names), o.Out, release.SumsFile)
}
