// Package buildinfo is the one place a latch binary's build is named: its version, the
// revision it was built from, the build date and the Go version. `latch version`,
// latch_build_info, /v1/status and the data directory's format.json all read Get, so they
// always agree.
//
// The release build (make release, make build) sets the three values with the linker:
//
//	go build -ldflags "-X github.com/latchd/latch/cluster/buildinfo.version=v1.2.3
//	  -X github.com/latchd/latch/cluster/buildinfo.revision=$(git rev-parse HEAD)
//	  -X github.com/latchd/latch/cluster/buildinfo.date=$(git log -1 --format=%cI HEAD)"
//
// A plain `go build` sets none of them: the revision and the date then come from what Go
// stamped into the binary (vcs.revision, vcs.time), and the version is "dev-" and the
// revision's first 12 digits (with "-dirty" for a modified tree), or "dev" without either.
// The variables are this package's only state, written by the linker and never at run time.
// It imports the standard library only.
package buildinfo

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); empty in a plain go build.
var (
	version  string // the release's git tag, v1.2.3
	revision string // the full commit hash
	date     string // the commit's time, RFC 3339 (a release's build date: reproducible)
)

// Unknown is a revision or date that neither the linker nor Go's VCS stamp gave.
const Unknown = "unknown"

// Info names one build; the JSON is /v1/status's "build" and `latch version --json`.
type Info struct {
	Version  string `json:"version"`  // v1.2.3, or dev-<revision> for a build that is no release
	Revision string `json:"revision"` // the commit hash, or Unknown
	Date     string `json:"date"`     // the build date (a release: its commit's time), or Unknown
	Go       string `json:"go"`       // the Go version that built it: go1.26.0
}

// Get returns this binary's build.
func Get() Info {
	var vcs map[string]string
	if bi, ok := debug.ReadBuildInfo(); ok {
		vcs = map[string]string{}
		for _, s := range bi.Settings {
			vcs[s.Key] = s.Value
		}
	}
	return resolve(version, revision, date, vcs, runtime.Version())
}

// resolve is Get's rule: the linker's values first, Go's VCS stamp (vcs.revision, vcs.time,
// vcs.modified) for what they leave empty.
func resolve(version, revision, date string, vcs map[string]string, goVersion string) Info {
	in := Info{Version: version, Revision: revision, Date: date, Go: goVersion}
	if in.Revision == "" {
		in.Revision = vcs["vcs.revision"]
	}
	if in.Date == "" {
		in.Date = vcs["vcs.time"]
	}
	if in.Version == "" {
		in.Version = "dev"
		if r := in.Revision; r != "" {
			in.Version += "-" + r[:min(len(r), 12)]
			if revision == "" && vcs["vcs.modified"] == "true" {
				in.Version += "-dirty"
			}
		}
	}
	if in.Revision == "" {
		in.Revision = Unknown
	}
	if in.Date == "" {
		in.Date = Unknown
	}
	return in
}

// String is the build on one line: "latch v1.2.3 (revision R, built D, go1.26.0)".
func (in Info) String() string {
	return fmt.Sprintf("latch %s (revision %s, built %s, %s)", in.Version, in.Revision, in.Date, in.Go)
}

// Write prints the build for `latch version` and `latch --version`: "latch VERSION" on the
// first line, then the revision, the date and the Go version, one a line; asJSON, the JSON
// object of Info on one line instead.
func (in Info) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(w, "latch %s\nrevision  %s\nbuilt     %s\ngo        %s\n", in.Version, in.Revision, in.Date, in.Go)
	return err
}
