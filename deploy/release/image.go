package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// The container image is the one deploy/container/Dockerfile describes: the static binary
// on distroless/static (nonroot, uid 65532), built by BuildKit for linux/amd64 and
// linux/arm64 at once. Its base comes from a registry and its binary is built inside the
// build, so it needs docker buildx (and the network); a machine without buildx gets
// everything else of the release and a line saying the image was skipped.

// ImagePlatforms are the platforms of the release image.
const ImagePlatforms = "linux/amd64,linux/arm64"

// ImageArchive is the file name of the release image: an OCI image layout (an index of
// both platforms) in a tar archive, which `docker load`, skopeo and crane read.
func ImageArchive(version string) string { return "latch-" + version + "-image.oci.tar" }

// ImageBuildArgs are the docker buildx build arguments of the release image for version at
// commit c, before the output: the Dockerfile's build arguments (and the OCI labels they
// set), with the build stage on the Go release this tool was built with (GO_IMAGE
// golang:1.26.8-bookworm for go1.26.8), so the image's binaries are the release's, byte
// for byte (the Dockerfile builds with BuildFlags' flags).
func ImageBuildArgs(version string, c Commit) []string {
	args := []string{"buildx", "build", "--platform", ImagePlatforms, "-f", "deploy/container/Dockerfile",
		"--build-arg", "VERSION=" + version, "--build-arg", "REVISION=" + c.Revision,
		"--build-arg", "CREATED=" + c.Date(), "--build-arg", "LICENSES=Apache-2.0",
		"--tag", Image + ":" + version}
	if v, ok := strings.CutPrefix(runtime.Version(), "go"); ok && goRelease.MatchString(v) {
		args = append(args, "--build-arg", "GO_IMAGE=golang:"+v+"-bookworm")
	}
	return args
}

// goRelease matches a Go release's version (1.26.8), which has an image of its own.
var goRelease = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// errNoBuildx is why a machine cannot build the image.
var errNoBuildx = errors.New("no docker buildx (install Docker with the buildx plugin, or run make release where it is: the release workflow does)")

// haveBuildx reports whether docker buildx runs here, or why not.
func haveBuildx(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return errNoBuildx
	}
	if err := exec.CommandContext(ctx, "docker", "buildx", "version").Run(); err != nil {
		return errNoBuildx
	}
	return nil
}

// BuildImage builds the release image into out as ImageArchive and returns its name, and
// with mode ImagesPush pushes it as Image:version (the caller has logged in); with mode
// ImagesSkip, or ImagesAuto and no buildx, it builds nothing and says so on log. The
// layers' timestamps are the commit's (SOURCE_DATE_EPOCH, rewrite-timestamp).
func BuildImage(ctx context.Context, root, out, version string, c Commit, mode ImageMode, log io.Writer) ([]string, error) {
	if mode == ImagesSkip {
		fmt.Fprintln(log, "release: image: skipped (IMAGES=skip)")
		return nil, nil
	}
	if err := haveBuildx(ctx); err != nil {
		if mode != ImagesAuto {
			return nil, fmt.Errorf("release: image: %w", err)
		}
		fmt.Fprintf(log, "release: image: skipped: %v\n", err)
		return nil, nil
	}
	name := ImageArchive(version)
	dest, err := filepath.Abs(filepath.Join(out, name))
	if err != nil {
		return nil, err
	}
	outputs := []string{"type=oci,dest=" + dest + ",rewrite-timestamp=true"}
	if mode == ImagesPush { // a second build from BuildKit's cache: the same image, pushed
		outputs = append(outputs, "type=image,push=true,rewrite-timestamp=true")
	}
	for _, output := range outputs {
		cmd := exec.CommandContext(ctx, "docker", append(ImageBuildArgs(version, c), "--output", output, ".")...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, log, log
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(c.Time.Unix(), 10))
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("release: docker buildx build --output %s: %w", output, err)
		}
	}
	fmt.Fprintf(log, "release: %s\n", name)
	if mode == ImagesPush {
		fmt.Fprintf(log, "release: pushed %s:%s\n", Image, version)
	}
	return []string{name}, nil
}
