package server

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestPlanDescriptors(t *testing.T) {
	for _, c := range []struct {
		limit         uint64
		want          int
		cluster       bool
		conns, http   int
		errorContains string
	}{
		{limit: 1 << 20, want: 10_000, conns: 10_000, http: 256},
		{limit: 1024, want: 10_000, conns: 1024 - 32 - 248 - 32, http: 248},
		{limit: 256, want: 10_000, conns: 256 - 32 - 56 - 28, http: 56},
		{limit: 1024, want: 10_000, cluster: true, conns: 1024 - 128 - 224 - 32, http: 224},
		{limit: 20_000, want: 1, conns: 1, http: 256},
		{limit: 40, want: 10_000, errorContains: "raise it"},
	} {
		d, err := PlanDescriptors(c.limit, c.want, c.cluster)
		if c.errorContains != "" {
			if err == nil || !strings.Contains(err.Error(), c.errorContains) {
				t.Errorf("limit %d: %v, want an error with %q", c.limit, err, c.errorContains)
			}
			continue
		}
		if err != nil || d.MaxConns != c.conns || d.HTTP != c.http {
			t.Errorf("limit %d, want %d, cluster %v: %d conns, %d HTTP, %v; want %d, %d", c.limit, c.want, c.cluster, d.MaxConns, d.HTTP, err, c.conns, c.http)
		}
	}
}

// FitDescriptors refuses an explicit --max-conns beyond the open-files limit, naming the
// fixes, and lowers the default to fit with a warning.
func TestFitDescriptors(t *testing.T) {
	var log strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Warn})
	const want = 1 << 40 // beyond any limit
	if _, err := FitDescriptors(want, true, false, logger); err == nil || !strings.Contains(err.Error(), "does not fit the open-files limit") {
		t.Fatalf("explicit --max-conns %d: %v, want a refusal", want, err)
	}
	d, err := FitDescriptors(want, false, false, logger)
	if err != nil || d.MaxConns < 1 || d.MaxConns >= want || !strings.Contains(log.String(), "lowering --max-conns") {
		t.Fatalf("default --max-conns %d: %+v, %v; want it lowered with a warning:\n%s", want, d, err, log.String())
	}
}
