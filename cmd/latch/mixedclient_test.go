package main

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/cluster/clustertest"
)

// runOf runs the latch binary bin ("" is this build) as a client verb and returns its exit
// code and output.
func runOf(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	if bin == "" {
		return run(t, nil, args...)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return code, string(out)
}

// The client port across builds, over real connections: a client of the previous build
// (latch/1 only) against this build's server, and this build's client (which offers
// revision 2 in its hello) against the previous build's server, each without and with a
// secret: ping, a grant, a wait that times out on the held key, and a release, with the
// tokens each server counts. The wire is latch/1 byte for byte both ways (docs/vectors pin
// the bytes; this checks that each build still talks to the other).
func TestClientsAcrossBuilds(t *testing.T) {
	clustertest.Slow(t, "builds the previous revision and starts four servers")
	prev, _ := prevLatch(t)
	secret := writeSecretFile(t, t.TempDir(), "client", clientSecretValue)
	for _, tc := range []struct{ name, server, client string }{
		{"previous client, this server", "", prev},
		{"this client, previous server", prev, ""},
	} {
		for _, auth := range []bool{false, true} {
			name := tc.name
			var srvArgs, cliArgs []string
			if auth {
				name += ", with a secret"
				srvArgs, cliArgs = []string{"--secret-file", secret}, []string{"--secret-file", secret}
			}
			t.Run(name, func(t *testing.T) {
				p := startServerOf(t, tc.server, nil, srvArgs...)
				with := func(args ...string) []string {
					return append(append(args[:1:1], append([]string{"--servers=" + p.listen}, cliArgs...)...), args[1:]...)
				}
				if code, out := runOf(t, tc.client, with("ping")...); code != 0 || !strings.HasPrefix(out, "pong in ") {
					t.Fatalf("ping: exit %d, %q", code, out)
				}
				var got struct {
					Token uint64 `json:"token"`
				}
				for want := uint64(1); want <= 2; want++ {
					code, out := runOf(t, tc.client, with("acquire", "--lease", "30s", "--json", "across/a")...)
					if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Token != want {
						t.Fatalf("acquire %d: exit %d, %q (%v)", want, code, out, err)
					}
					if want == 1 {
						start := time.Now()
						if code, out := runOf(t, tc.client, with("acquire", "--wait", "1s", "across/a")...); code != exitNotAcquired {
							t.Fatalf("acquire of the held key: exit %d, %q; want %d", code, out, exitNotAcquired)
						}
						if time.Since(start) < time.Second {
							t.Fatalf("the held key's wait ended after %v, before its 1 s", time.Since(start))
						}
					}
					if code, out := runOf(t, tc.client, with("release", "across/a", strconv.FormatUint(got.Token, 10))...); code != 0 {
						t.Fatalf("release of token %d: exit %d, %q", got.Token, code, out)
					}
				}
			})
		}
	}
}
