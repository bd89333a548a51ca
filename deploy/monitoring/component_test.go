package monitoring_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsjson "sigs.k8s.io/json"

	"github.com/latchd/latch/deploy/manifests"
)

// serviceMonitor is the part of prometheus-operator's ServiceMonitor that the component sets.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// strictJSON decodes js into v, failing t on unknown or duplicate fields.
func strictJSON(t *testing.T, what string, js []byte, v any) {
	t.Helper()
	strictErrs, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, e := range strictErrs {
		t.Errorf("%s: %v", what, e)
	}
}

// TestMonitoringComponent renders the base with the monitoring component in a namespace, as
// an overlay would: the ServiceMonitor selects the Service latch (and scrapes its http port,
// which serves /metrics), no other Service gives it a target, and the PrometheusRule carries
// the rule file's groups through kustomize unchanged.
func TestMonitoringComponent(t *testing.T) {
	dir := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err == nil {
			p, err = filepath.Rel(dir, abs)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: latch\nresources:\n  - " +
		rel("../k8s/base") + "\ncomponents:\n  - " + rel(componentDir) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sm *serviceMonitor
	var rules *ruleFile
	services := map[string]*corev1.Service{}
	for _, o := range objs {
		switch o.APIVersion + " " + o.Kind {
		case "monitoring.coreos.com/v1 ServiceMonitor":
			sm = new(serviceMonitor)
			strictJSON(t, "ServiceMonitor "+o.Name, o.JSON, sm)
		case "monitoring.coreos.com/v1 PrometheusRule":
			var cr struct {
				Spec ruleFile `json:"spec"`
			}
			if err := json.Unmarshal(o.JSON, &cr); err != nil {
				t.Fatal(err)
			}
			rules = &cr.Spec
		case "v1 Service":
			s := new(corev1.Service)
			strictJSON(t, "Service "+o.Name, o.JSON, s)
			services[o.Name] = s
		}
		if o.Namespace != "latch" && o.Kind != "Namespace" {
			t.Errorf("%s %s: namespace %q, want the overlay's latch", o.Kind, o.Name, o.Namespace)
		}
	}
	if sm == nil || rules == nil {
		t.Fatalf("the component renders no ServiceMonitor (%v) or no PrometheusRule (%v)", sm != nil, rules != nil)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("ServiceMonitor endpoints %+v, want port http, path /metrics", sm.Spec.Endpoints)
	}
	sel := labels.SelectorFromSet(sm.Spec.Selector.MatchLabels)
	var targets []string
	for name, s := range services {
		if !sel.Matches(labels.Set(s.Labels)) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Name == "http" {
				targets = append(targets, name)
			}
		}
	}
	if !slices.Equal(targets, []string{"latch"}) {
		t.Errorf("the ServiceMonitor scrapes port http of Services %q, want [latch]", targets)
	}
	var f ruleFile
	readYAML(t, rulesFile, &f)
	if len(rules.Groups) != len(f.Groups) {
		t.Fatalf("PrometheusRule: %d groups, %s %d", len(rules.Groups), rulesFile, len(f.Groups))
	}
	for i := range f.Groups {
		if !slices.EqualFunc(rules.Groups[i].Rules, f.Groups[i].Rules, sameRule) {
			t.Errorf("PrometheusRule: group %s differs from %s after kustomize", f.Groups[i].Name, rulesFile)
		}
	}
}
