package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/latchd/latch/wire"
	"github.com/latchd/latch/wire/wiretest"
)

// metricLine returns the line of the Prometheus text exposition that starts with name.
func metricLine(exposition, name string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return ""
}

// metricValue is the value of the unlabelled sample name in the exposition ("" if none).
func metricValue(exposition, name string) string {
	return strings.TrimPrefix(metricLine(exposition, name), name+" ")
}

// metric reads one unlabelled integer gauge from node http's /metrics (-1 if it is not there).
func metric(http, name string) int64 {
	_, body := httpGetQuiet(http + "/metrics")
	v, err := strconv.ParseInt(metricValue(body, name), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// lintMetrics scrapes /metrics of the node at hostPort and fails on anything Prometheus'
// own linter (promlint, from client_golang's testutil) finds. It returns the exposition.
func lintMetrics(t *testing.T, hostPort string) string {
	t.Helper()
	code, body := httpGet(t, "http://"+hostPort+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics of %s: %d", hostPort, code)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint cannot parse /metrics of %s: %v", hostPort, err)
	}
	for _, p := range problems {
		t.Errorf("promlint, %s: %s: %s", hostPort, p.Metric, p.Text)
	}
	return body
}

// wantMetrics fails for every line of want missing from the exposition body.
func wantMetrics(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, "\n"+w+"\n") {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}

func TestMetricsPassPromlintSingleMode(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	c := p.dial(t)
	tok := c.Do(t, wiretest.Acquire(1, 0, 30, "lint/a")).Token
	c.Raw(t, wiretest.Release(2, tok, "lint/a"))
	c.ExpectOp(t, wire.OpRelease, 2)
	c.Raw(t, wiretest.Release(3, tok, "lint/a")) // a second release: N
	c.ExpectOp(t, wire.OpNotHeld, 3)

	body := lintMetrics(t, p.http)
	wantMetrics(t, body,
		`latch_admission_gate_closed{gate="keys"} 0`,
		`latch_admission_gate_closed{gate="pending"} 0`,
		`latch_admission_gate_closed{gate="waiters"} 0`,
		`latch_release_latency_seconds_count 2`,
		`latch_requests_refused_total{reason="unavailable"} 0`,
		`latch_frame_errors_total{reason="bad_key"} 0`,
		`latch_ready 1`,
		`latch_expiry_lag_seconds 0`,
	)
	labels := buildInfo(t, body)
	for _, want := range []string{fmt.Sprintf("version=%q", testVersion), fmt.Sprintf("goversion=%q", runtime.Version()),
		fmt.Sprintf("revision=%q", testRevision), fmt.Sprintf("date=%q", testDate)} {
		if !strings.Contains(labels, want) {
			t.Errorf("latch_build_info{%s lacks %s", labels, want)
		}
	}
	var st struct{ Build map[string]string }
	if code, body := httpGet(t, "http://"+p.http+"/v1/status"); code != 200 || json.Unmarshal([]byte(body), &st) != nil ||
		st.Build["version"] != testVersion || st.Build["revision"] != testRevision || st.Build["date"] != testDate || st.Build["go"] != runtime.Version() {
		t.Errorf("/v1/status: HTTP %d, build %v, want the build latch_build_info names", code, st.Build)
	}
	for _, gone := range []string{"latch_admission_keys_closed", `latch_frame_errors_total{reason="unavailable"}`, "latch_raft_"} {
		if strings.Contains(body, gone) {
			t.Errorf("/metrics of a single-mode server has %q", gone)
		}
	}
}

// buildInfo returns the labels of latch_build_info 1, or fails.
func buildInfo(t *testing.T, body string) string {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if labels, ok := strings.CutPrefix(line, "latch_build_info{"); ok && strings.HasSuffix(labels, "} 1") {
			return labels
		}
	}
	t.Fatal("/metrics lacks latch_build_info{...} 1")
	return ""
}

func TestMetricsPassPromlintClusterMode(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	l, c := tc.dialLeader(t)
	tok := c.Do(t, wiretest.Acquire(1, 0, 30, "lint/c")).Token
	c.Raw(t, wiretest.Release(2, tok, "lint/c"))
	c.ExpectOp(t, wire.OpRelease, 2)

	leader := lintMetrics(t, tc.procs[l].http)
	wantMetrics(t, leader, `latch_raft_last_contact_seconds 0`, `latch_release_latency_seconds_count 1`, `latch_ready 1`,
		`latch_expiry_lag_seconds 0`)
	if line := metricLine(leader, "latch_raft_commit_latency_seconds_count"); line == "" || strings.HasSuffix(line, " 0") {
		t.Errorf("the leader's commit latency histogram is empty after a grant and a release: %q", line)
	}
	f := (l + 1) % 3
	follower := lintMetrics(t, tc.procs[f].http)
	if line := metricLine(follower, "latch_raft_last_contact_seconds"); line == "" || strings.Contains(line, "-1") {
		t.Errorf("follower's latch_raft_last_contact_seconds: %q, want a sample of seconds", line)
	}
	wantMetrics(t, follower, `latch_ready 1`, `latch_expiry_lag_seconds 0`)
}
