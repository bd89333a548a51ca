package workflows_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
)

const workflowsDir = "../../.github/workflows"

// lint runs actionlint on the files, as `actionlint FILES` does without shellcheck or
// pyflakes (so the result does not depend on what is installed here), and returns what it
// found, one error a line.
func lint(t *testing.T, files ...string) []string {
	t.Helper()
	l, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{Color: actionlint.ColorOptionKindNever})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := l.LintFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// Both workflows exist and pass actionlint.
func TestWorkflowsLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(workflowsDir, "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range files {
		names[filepath.Base(f)] = true
	}
	for _, want := range []string{"ci.yml", "release.yml"} {
		if !names[want] {
			t.Errorf("%s has no %s (it has %v)", workflowsDir, want, names)
		}
	}
	for _, e := range lint(t, files...) {
		t.Error(e)
	}
}

// The linter does find mistakes: a workflow with a missing runs-on, an unknown event, a bad
// expression and an unknown input of a known action fails it.
func TestWorkflowsLintCatchesMistakes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".github", "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.yml")
	body := `name: broken
on:
  pushh:
jobs:
  build:
    steps:
      - uses: actions/checkout@v6
        with:
          fetch-deep: 0
      - run: echo ${{ github.nosuchthing }}
`
	if err := os.WriteFile(broken, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := lint(t, broken)
	all := strings.Join(errs, "\n")
	for _, want := range []string{`"runs-on" section is missing`, `unknown Webhook event "pushh"`, `fetch-deep`, `nosuchthing`} {
		if !strings.Contains(all, want) {
			t.Errorf("actionlint did not report %q; it reported:\n%s", want, all)
		}
	}
}
