package buildinfo

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamp := map[string]string{"vcs.revision": rev, "vcs.time": "2026-12-01T10:00:00Z", "vcs.modified": "false"}
	dirty := map[string]string{"vcs.revision": rev, "vcs.time": "2026-12-01T10:00:00Z", "vcs.modified": "true"}
	cases := []struct {
		name                    string
		version, revision, date string
		vcs                     map[string]string
		want                    Info
	}{
		{"release", "v1.2.3", rev, "2026-12-02T09:00:00+01:00", stamp,
			Info{"v1.2.3", rev, "2026-12-02T09:00:00+01:00", "go1.26.0"}},
		{"go build in a checkout", "", "", "", stamp,
			Info{"dev-0123456789ab", rev, "2026-12-01T10:00:00Z", "go1.26.0"}},
		{"modified checkout", "", "", "", dirty,
			Info{"dev-0123456789ab-dirty", rev, "2026-12-01T10:00:00Z", "go1.26.0"}},
		{"no stamp", "", "", "", nil,
			Info{"dev", Unknown, Unknown, "go1.26.0"}},
		{"version only", "v0.0.0-test", "", "", nil,
			Info{"v0.0.0-test", Unknown, Unknown, "go1.26.0"}},
		{"short revision", "", "abc", "", nil,
			Info{"dev-abc", "abc", Unknown, "go1.26.0"}},
	}
	for _, c := range cases {
		if got := resolve(c.version, c.revision, c.date, c.vcs, "go1.26.0"); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestWrite(t *testing.T) {
	in := Info{"v1.2.3", "abc", "2026-12-02T09:00:00Z", "go1.26.0"}
	var b strings.Builder
	if err := in.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	if want := "latch v1.2.3\nrevision  abc\nbuilt     2026-12-02T09:00:00Z\ngo        go1.26.0\n"; b.String() != want {
		t.Errorf("text:\n%q, want\n%q", b.String(), want)
	}
	b.Reset()
	if err := in.Write(&b, true); err != nil {
		t.Fatal(err)
	}
	var back Info
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil || back != in {
		t.Errorf("json %q: %+v, %v", b.String(), back, err)
	}
	if got := in.String(); got != "latch v1.2.3 (revision abc, built 2026-12-02T09:00:00Z, go1.26.0)" {
		t.Errorf("String: %q", got)
	}
	if g := Get(); g.Version == "" || g.Revision == "" || g.Date == "" || !strings.HasPrefix(g.Go, "go") {
		t.Errorf("Get: %+v has an empty field", g)
	}
}
