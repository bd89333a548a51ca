package monitoring_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboard is the part of the Grafana dashboard JSON these tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dsVar is how every panel, target and query variable names its data source.
var dsVar = datasource{Type: "prometheus", UID: "${datasource}"}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// panels are every panel of d, those inside collapsed rows included.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// queries are the PromQL of every target and query variable of d, with Grafana's variables
// replaced as a query of all jobs and nodes would have them.
func (d dashboard) queries(t *testing.T) []string {
	t.Helper()
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$job", ".*", "$instance", ".*")
	var out []string
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		out = append(out, vars.Replace(m[1]))
	}
	return out
}

// TestDashboard: the dashboard is valid JSON with a data source variable that every panel,
// target and query variable uses, job and instance variables, unique panel ids, panels on
// the 24-column grid, and PromQL that promtool parses. It covers what issue 23 asks of it.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, schemaVersion %d: want a uid and schemaVersion 36 or later", d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || *v.Datasource != dsVar) {
			t.Errorf("variable %s: datasource %+v, want %+v", v.Name, v.Datasource, dsVar)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("no %s variable %q", typ, name)
		}
	}
	ids := map[int]string{}
	for _, p := range d.panels() {
		if p.ID == 0 {
			t.Errorf("panel %q: no id", p.Title)
		} else if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q: the same id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != dsVar {
			t.Errorf("panel %q: datasource %+v, want %+v", p.Title, p.Datasource, dsVar)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || tg.Datasource == nil || *tg.Datasource != dsVar {
				t.Errorf("panel %q target %q: want an expr, a refId and datasource %+v", p.Title, tg.RefID, dsVar)
			}
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q target %q: %s does not follow the instance variable", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	used := metricNames(d.queries(t))
	for _, m := range []string{
		"latch_acquires_total", "latch_releases_total", "latch_grant_latency_seconds_bucket",
		"latch_release_latency_seconds_bucket", "latch_keys", "latch_waiters", "latch_admission_gate_closed",
		"latch_raft_term", "latch_raft_commit_latency_seconds_bucket", "latch_requests_refused_total",
		"latch_leases_expired_total", "latch_leading", "latch_ready",
	} {
		if !slices.Contains(used, m) {
			t.Errorf("the dashboard shows nothing of %s", m)
		}
	}
	// promtool parses PromQL in a rule file: one recording rule per query.
	var rf strings.Builder
	rf.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range d.queries(t) {
		js, _ := json.Marshal(q)
		fmt.Fprintf(&rf, "      - record: dashboard:query_%d\n        expr: %s\n", i, js)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, []byte(rf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, ".", "check", "rules", path)
}

// metricName is a latch metric's name in PromQL.
var metricName = regexp.MustCompile(`\blatch_[a-z0-9_]+\b`)

// metricNames are the distinct latch metric names that queries name, sorted.
func metricNames(queries []string) []string {
	var out []string
	for _, q := range queries {
		for _, m := range metricName.FindAllString(q, -1) {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out
}
