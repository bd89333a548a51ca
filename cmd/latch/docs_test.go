package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks keeps the documentation inside the repository: every relative link of every
// *.md names a file or directory that exists, and no *.md or doc.go points at notes kept
// outside it or at the design note that docs/architecture.md absorbed.
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	outside := []string{"../shared", "shared/notes", "seeds/", "DESIGN.md"}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		md := strings.HasSuffix(path, ".md")
		if d.IsDir() || !md && d.Name() != "doc.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, s := range outside {
			if strings.Contains(string(b), s) {
				t.Errorf("%s mentions %q: say what it holds instead (the repository is all a reader has)", rel, s)
			}
		}
		if !md {
			return nil
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
