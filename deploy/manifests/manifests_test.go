package manifests_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/latchd/latch/deploy/manifests"
)

func TestPodArgsAndReplicas(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		replicas int
		args     []string
	}{
		{baseDir, 3, specArgs},
		{threeDir, 3, specArgs},
		{fiveDir, 5, specArgs},
		{tlsDir, 3, tlsArgs},
	} {
		args, err := manifests.PodArgs(tc.dir)
		if err != nil || !slices.Equal(args, tc.args) {
			t.Errorf("PodArgs(%s) = %q, %v; want %q", tc.dir, args, err, tc.args)
		}
		n, err := manifests.Replicas(tc.dir)
		if err != nil || n != tc.replicas {
			t.Errorf("Replicas(%s) = %d, %v; want %d", tc.dir, n, err, tc.replicas)
		}
	}
	if _, err := manifests.PodArgs(certMgrDir); !errors.Is(err, manifests.ErrNotFound) {
		t.Errorf("PodArgs(%s) error %v, want ErrNotFound", certMgrDir, err)
	}
	if _, err := manifests.Replicas("testdata/missing"); err == nil {
		t.Error("Replicas of a missing directory: no error")
	}
}

func TestExpandArgs(t *testing.T) {
	vars := map[string]string{"POD_NAME": "latch-1", "EMPTY": ""}
	for _, tc := range []struct{ in, want string }{
		{"$(POD_NAME)", "latch-1"},
		{"$(POD_NAME).latch-peers:7401", "latch-1.latch-peers:7401"},
		{"a$(POD_NAME)b$(POD_NAME)", "alatch-1blatch-1"},
		{"$(EMPTY)x", "x"},
		{"$(UNSET)", "$(UNSET)"},
		{"$$(POD_NAME)", "$(POD_NAME)"},
		{"$$", "$"},
		{"cost $5", "cost $5"},
		{"$(POD_NAME", "$(POD_NAME"},
		{"end$", "end$"},
		{"plain", "plain"},
	} {
		if got := manifests.ExpandArgs([]string{tc.in}, vars)[0]; got != tc.want {
			t.Errorf("ExpandArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
