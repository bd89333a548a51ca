package clustertest

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/latchd/latch"

// layer is what one of latch's packages may depend on (directly or through others).
type layer struct {
	pkg string
	// only, when not nil, lists every latch package pkg may depend on.
	only []string
	// stdOnly: besides only, nothing outside the standard library (no third party).
	stdOnly bool
	// never lists latch packages pkg must not depend on.
	never []string
}

// layers is the one table of latch's package layering; package names are relative to the
// module. Every package of the module must also never depend on cmd/latch, and only tests
// may import the test-support packages in testOnly.
var layers = []layer{
	{pkg: "wire", only: []string{}},
	{pkg: "fsm", only: []string{}},
	{pkg: "expiry", only: []string{}},
	// The client is what applications link: the protocol and the standard library, no server
	// code and no third party.
	{pkg: "client", only: []string{"wire"}, stdOnly: true},
	{pkg: "client/fence", only: []string{}, stdOnly: true},
	// raftnode is the replicated log under fsm; cluster/member wires it to cluster.
	// cluster/outcome is the outcome vocabulary raftnode reports in (it maps outcomes to wire
	// reasons, hence wire).
	{pkg: "cluster/raftnode", only: []string{"fsm", "cluster/internal/ratelog", "cluster/outcome", "wire"}},
	{pkg: "cluster/outcome", only: []string{"wire"}},
	// The build's name, which every part reads: nothing but the standard library.
	{pkg: "cluster/buildinfo", only: []string{}, stdOnly: true},
	// The process logger: hclog and the standard library only.
	{pkg: "cmd/internal/logs", only: []string{}},
	{pkg: "cluster", never: []string{"cluster/raftnode"}},
	// Single mode has no peers: no member, no peer port, no forwarding.
	{pkg: "cluster/single", never: []string{"cluster/member", "cluster/peer", "cluster/forward"}},
	// Credential files: the wire's key-file rule and the peer port's mutual TLS, no node.
	{pkg: "cluster/creds", only: []string{"wire", "cluster/peer", "cluster/internal/netpeek", "cluster/internal/ratelog"}},
}

// testOnly are imported by _test.go files (and by one another) only.
var testOnly = []string{"cluster/clustertest", "cluster/clustertest/history", "cluster/clustertest/procstat", "cluster/clustertest/faultfs", "cluster/servertest", "cluster/rafttest", "cluster/behaviour"}

type listed struct {
	ImportPath string
	Standard   bool
	Deps       []string
	Module     *struct{ Path string }
}

// TestLayering checks the dependency edges between latch's packages against layers, on the
// graph `go list -deps` reports for the whole module.
func TestLayering(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Deps,Module", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	for _, l := range layers {
		p, ok := pkgs[module+"/"+l.pkg]
		if !ok {
			t.Errorf("package %s is in the layering table but not in the module", l.pkg)
			continue
		}
		checkLayer(t, l, p, pkgs)
	}
	for path, p := range pkgs {
		if p.Module == nil || p.Module.Path != module || slices.Contains(testOnly, strings.TrimPrefix(path, module+"/")) {
			continue // test support may build on test support
		}
		for _, d := range p.Deps {
			if d == module+"/cmd/latch" {
				t.Errorf("%s depends on cmd/latch; nothing may import the binary", path)
			}
			for _, to := range testOnly {
				if d == module+"/"+to {
					t.Errorf("%s depends on %s, which only tests may import", path, to)
				}
			}
		}
	}
}

func checkLayer(t *testing.T, l layer, p listed, pkgs map[string]listed) {
	t.Helper()
	allowed := map[string]bool{}
	for _, a := range l.only {
		allowed[module+"/"+a] = true
	}
	for _, d := range p.Deps {
		rel, ours := strings.CutPrefix(d, module+"/")
		switch {
		case ours && l.only != nil && !allowed[d]:
			t.Errorf("%s depends on %s; of latch's packages it may import only %v", l.pkg, rel, l.only)
		case !ours && l.stdOnly && !pkgs[d].Standard:
			t.Errorf("%s depends on %s; it may import only %v and the standard library", l.pkg, d, l.only)
		}
		for _, n := range l.never {
			if d == module+"/"+n {
				t.Errorf("%s depends on %s, which it must never import", l.pkg, n)
			}
		}
	}
}
