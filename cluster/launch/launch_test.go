package launch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchd/latch/client"
	"github.com/latchd/latch/cluster"
	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/cluster/clustertest"
	"github.com/latchd/latch/cluster/creds"
	"github.com/latchd/latch/cluster/server"
)

func settings(t *testing.T, clustered bool) Config {
	cfg := Config{Cluster: clustered, Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0", MaxConns: server.DefaultMaxConns, Build: buildinfo.Info{Version: "test"},
		Node: cluster.DefaultConfig()}
	if clustered {
		cfg.Member = MemberFlags{ID: "n1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", Bootstrap: true}
	}
	return cfg
}

// Either mode starts from its settings, serves locks on the address it reports, shows its
// build in /v1/status (and a member records it in the data directory), and stops.
func TestStartServesAndStops(t *testing.T) {
	for _, clustered := range []bool{false, true} {
		cfg := settings(t, clustered)
		run, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("cluster=%v: %v", clustered, err)
		}
		cl, err := client.New(client.Config{Servers: []string{run.Addr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
		tk, err := cl.Acquire(ctx, "k", 0, client.AcquireOptions{Wait: 30 * time.Second, Lease: 10 * time.Second})
		if err != nil || tk.Token != 1 {
			t.Fatalf("cluster=%v: acquire: %v %+v", clustered, err, tk)
		}
		cancel()
		cl.Close()
		var st struct{ Build buildinfo.Info }
		if resp, err := http.Get("http://" + run.HTTPAddr().String() + "/v1/status"); err != nil {
			t.Errorf("cluster=%v: /v1/status: %v", clustered, err)
		} else {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || st.Build != cfg.Build {
				t.Errorf("cluster=%v: /v1/status build %+v (%v), want %+v", clustered, st.Build, err, cfg.Build)
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), clustertest.Bound)
		if err := run.Stop(sctx); err != nil {
			t.Fatalf("cluster=%v: stop: %v", clustered, err)
		}
		cancel()
		if clustered {
			raw, err := os.ReadFile(filepath.Join(cfg.Member.DataDir, "format.json"))
			if want := `{"format":1,"written_by":"test"}` + "\n"; err != nil || string(raw) != want {
				t.Errorf("format.json: %q (%v), want %q", raw, err, want)
			}
		}
	}
}

// Settings that can never work are refused as such (ErrSettings: a usage error, nothing
// started); a setting that could work elsewhere is not.
func TestStartRefusals(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "s")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := settings(t, false)
	shared.Secrets = creds.SecretFiles{Client: secret, Admin: secret}
	noWayIn := settings(t, true)
	noWayIn.Member.Bootstrap = false
	open := settings(t, false)
	open.Listen = "0.0.0.0:0"
	for name, r := range map[string]struct {
		cfg      Config
		settings bool
		says     string
	}{
		"one secret for two principals": {shared, true, "secret-file"},
		"a member with no way in":       {noWayIn, true, "--initial-cluster"},
		"an open port with no secret":   {open, false, "--insecure"},
	} {
		run, err := Start(context.Background(), r.cfg)
		if err == nil {
			run.Stop(context.Background())
			t.Fatalf("%s: started", name)
		}
		if errors.Is(err, ErrSettings) != r.settings || !strings.Contains(err.Error(), r.says) || strings.Contains(err.Error(), "settings refused") {
			t.Errorf("%s: %v (ErrSettings %v, want %v; want %q in it)", name, err, errors.Is(err, ErrSettings), r.settings, r.says)
		}
	}
}
