// Package monitoring_test checks the monitoring kit in this directory: the alerting rules
// (promtool, and a test case and a runbook for every alert), the PrometheusRule of
// deploy/k8s/components/monitoring (the same groups), the Grafana dashboard, and that every
// metric they name is one a real latch node exports.
package monitoring_test

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/latchd/latch/cluster/clustertest"
)

// The files under test, relative to this package.
const (
	rulesFile     = "latch-alerts.yaml"
	rulesTestFile = "tests/latch-alerts.test.yaml"
	dashboardFile = "latch-dashboard.json"
	runbookFile   = "../../docs/operations.md"
	componentDir  = "../k8s/components/monitoring"
	ruleCRFile    = componentDir + "/prometheusrule.yaml"
	// runbookBase is where every alert's runbook_url points, followed by its section's anchor.
	runbookBase = "https://github.com/latchd/latch/blob/main/docs/operations.md#"
)

var update = flag.Bool("update", false, "rewrite "+ruleCRFile+" from "+rulesFile)

// ruleFile is a Prometheus rule file, as far as these tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// alerts are the rules of the rule file, each an alert.
func alerts(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, rulesFile, &f)
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is no alert (record %q): this file holds alerts only", g.Name, r.Record)
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no alerts", rulesFile)
	}
	return out
}

// promtool runs promtool with args in dir and fails t with its output if it fails. Without
// promtool the test is skipped (a failure under CI=true).
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		clustertest.SkipUnlessCI(t, "promtool is not installed (Debian: apt-get install prometheus)")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRulesPromtool: the rule file passes `promtool check rules`, and its unit tests
// `promtool test rules`.
func TestAlertRulesPromtool(t *testing.T) {
	promtool(t, ".", "check", "rules", rulesFile)
	promtool(t, filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))
}

// unitTests is the promtool test file, as far as TestAlertsHaveTestsAndRunbooks reads it.
type unitTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Interval    string `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// anchors are the GitHub anchors of the headings of the Markdown file at path.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return out
}

// TestAlertsHaveTestsAndRunbooks: every alert has a severity, a hold, a summary and a
// description; its runbook_url names a section of docs/operations.md; and the promtool test
// file has a case where it fires (labels and annotations as expected) and one where it does
// not. A test of an alert the rule file lacks is a failure too.
func TestAlertsHaveTestsAndRunbooks(t *testing.T) {
	rules := alerts(t)
	sections := anchors(t, runbookFile)
	var u unitTests
	readYAML(t, rulesTestFile, &u)
	if !slices.Equal(u.RuleFiles, []string{"../" + rulesFile}) {
		t.Errorf("%s: rule_files %q, want [../%s]", rulesTestFile, u.RuleFiles, rulesFile)
	}
	fires, quiet := map[string]int{}, map[string]int{}
	for _, tc := range u.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) == 0 {
				quiet[a.Alertname]++
				continue
			}
			fires[a.Alertname]++
			for _, e := range a.ExpAlerts {
				if e.ExpLabels["severity"] == "" || e.ExpAnnotations["runbook_url"] == "" {
					t.Errorf("%s at %s: an expected alert without its severity or runbook_url", a.Alertname, a.EvalTime)
				}
			}
		}
	}
	names := map[string]bool{}
	for _, r := range rules {
		if names[r.Alert] {
			t.Errorf("alert %s: defined twice", r.Alert)
		}
		names[r.Alert] = true
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.For == "" {
			t.Errorf("alert %s: no for: a single bad scrape would page", r.Alert)
		}
		for _, k := range []string{"summary", "description"} {
			if r.Annotations[k] == "" {
				t.Errorf("alert %s: no %s", r.Alert, k)
			}
		}
		if a, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase); !ok || !sections[a] {
			t.Errorf("alert %s: runbook_url %q is not %s<a heading of %s>", r.Alert, r.Annotations["runbook_url"], runbookBase, runbookFile)
		} else if a != strings.ToLower(r.Alert) {
			t.Errorf("alert %s: runbook anchor %q, want its own section #%s", r.Alert, a, strings.ToLower(r.Alert))
		}
		if fires[r.Alert] == 0 {
			t.Errorf("alert %s: no test case in %s where it fires", r.Alert, rulesTestFile)
		}
		if quiet[r.Alert] == 0 {
			t.Errorf("alert %s: no test case in %s where it does not fire", r.Alert, rulesTestFile)
		}
	}
	for name := range fires {
		if !names[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
}

// ruleCRHeader is the PrometheusRule around the rule file's groups.
const ruleCRHeader = `# Generated from deploy/monitoring/latch-alerts.yaml: edit that file, then run
#   cd deploy/monitoring && go test -run TestPrometheusRuleMatchesRules -update
# (the test fails while the two differ).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: latch
  labels:
    app.kubernetes.io/name: latch
spec:
`

// ruleCR is the PrometheusRule that holds the rule file's groups: its text from the first
// line that is no comment, indented under spec.
func ruleCR(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for len(lines) > 0 && (strings.HasPrefix(lines[0], "#") || strings.TrimSpace(lines[0]) == "") {
		lines = lines[1:]
	}
	var out bytes.Buffer
	out.WriteString(ruleCRHeader)
	for _, l := range lines {
		if l != "" {
			out.WriteString("  " + l)
		}
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// TestPrometheusRuleMatchesRules: the component's PrometheusRule is the rule file's groups,
// line for line (with -update, it is rewritten so), and they decode to the same rules.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	want := ruleCR(t)
	if *update {
		if err := os.WriteFile(ruleCRFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(ruleCRFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the groups of %s: run go test -run TestPrometheusRuleMatchesRules -update in deploy/monitoring", ruleCRFile, rulesFile)
	}
	var cr struct {
		Spec ruleFile `json:"spec"`
	}
	if err := yaml.Unmarshal(got, &cr); err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	readYAML(t, rulesFile, &f)
	if len(cr.Spec.Groups) != len(f.Groups) {
		t.Fatalf("%s: %d groups, %s %d", ruleCRFile, len(cr.Spec.Groups), rulesFile, len(f.Groups))
	}
	for i := range f.Groups {
		if cr.Spec.Groups[i].Name != f.Groups[i].Name || !slices.EqualFunc(cr.Spec.Groups[i].Rules, f.Groups[i].Rules, sameRule) {
			t.Errorf("group %s differs", f.Groups[i].Name)
		}
	}
}

func sameRule(a, b rule) bool {
	return a.Alert == b.Alert && a.Record == b.Record && a.Expr == b.Expr && a.For == b.For &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations)
}
