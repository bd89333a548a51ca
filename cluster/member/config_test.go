package member

import (
	"strings"
	"testing"

	"github.com/latchd/latch/cluster/raftnode"
)

// Each rule of Validate refuses what cannot work and names the flag to change; a complete
// config passes.
func TestValidateNamesTheFlag(t *testing.T) {
	base := func() Config {
		c := DefaultConfig()
		c.Raft.ID, c.Raft.DataDir, c.Listen, c.HTTP = "a", t.TempDir(), "127.0.0.1:7401", "127.0.0.1:7402"
		return c
	}
	initial := []raftnode.Peer{{ID: "a", Addr: "127.0.0.1:7401"}, {ID: "b", Addr: "127.0.0.1:7411"}}
	for _, c := range []struct {
		name string
		mut  func(*Config)
		want string // "" passes
	}{
		{"complete", func(*Config) {}, ""},
		{"initial cluster", func(c *Config) { c.Raft.InitialCluster = initial }, ""},
		{"no id", func(c *Config) { c.Raft.ID = "" }, "--id and --data-dir"},
		{"no data dir", func(c *Config) { c.Raft.DataDir = "" }, "--id and --data-dir"},
		{"bootstrap and initial", func(c *Config) { c.Raft.Bootstrap, c.Raft.InitialCluster = true, initial }, "--bootstrap excludes"},
		{"bootstrap and join", func(c *Config) { c.Raft.Bootstrap, c.Join = true, "127.0.0.1:7402" }, "--bootstrap excludes"},
		{"not listed", func(c *Config) { c.Raft.ID, c.Raft.InitialCluster = "z", initial }, `--id "z" is not in --initial-cluster`},
		{"not listed, joins", func(c *Config) { c.Raft.ID, c.Raft.InitialCluster, c.Join = "z", initial, "127.0.0.1:7402" }, ""},
		{"open peer port", func(c *Config) { c.Listen = "0.0.0.0:7401" }, "--raft-addr 0.0.0.0:7401"},
		{"open peer port, insecure", func(c *Config) { c.Listen, c.Insecure = "0.0.0.0:7401", true }, ""},
		{"open http", func(c *Config) { c.HTTP = "0.0.0.0:7402" }, "--http 0.0.0.0:7402"},
		{"open http, insecure", func(c *Config) { c.HTTP, c.Insecure = "0.0.0.0:7402", true }, ""},
		{"open http, admin credential", func(c *Config) {
			c.HTTP, c.Admin.AdminSecrets, c.Peer.Secrets = "0.0.0.0:7402", [][]byte{[]byte("admin-secret-0123456789abcdef01234")}, [][]byte{[]byte("peer-secret-0123456789abcdef012345")}
		}, ""},
		{"no http", func(c *Config) { c.HTTP = "" }, "--http"},
		{"advertise differs", func(c *Config) { c.Raft.InitialCluster, c.Raft.Advertise = initial, "127.0.0.1:9999" }, "--advertise is"},
		{"allowed hosts", func(c *Config) { c.HTTPHosts = []string{"latch.ns.svc", "proxy.example:443"} }, ""},
		{"allowed host not a name", func(c *Config) { c.HTTPHosts = []string{"evil example"} }, `--http-allowed-host "evil example"`},
	} {
		cfg := base()
		c.mut(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// The advertised address: --advertise, else this node's --initial-cluster entry, else
// --raft-addr.
func TestAdvertise(t *testing.T) {
	c := DefaultConfig()
	c.Raft.ID, c.Listen = "a", "127.0.0.1:7401"
	if got := c.advertise(); got != c.Listen {
		t.Errorf("no --advertise, no list: %q", got)
	}
	c.Raft.InitialCluster = []raftnode.Peer{{ID: "a", Addr: "a.latch:7401"}}
	if got := c.advertise(); got != "a.latch:7401" {
		t.Errorf("listed: %q", got)
	}
	c.Raft.Advertise = "a.latch:7401"
	if got := c.advertise(); got != "a.latch:7401" {
		t.Errorf("--advertise: %q", got)
	}
}

// HTTP answers to the names the node is reached by: its --http, --advertise (or its entry in
// --initial-cluster) and --join hosts, and --http-allowed-host.
func TestHosts(t *testing.T) {
	c := DefaultConfig()
	c.Raft.ID, c.Listen, c.HTTP = "a", "0.0.0.0:7401", "a.http.example:7402"
	c.Raft.InitialCluster = []raftnode.Peer{{ID: "a", Addr: "a.latch-peers:7401"}, {ID: "b", Addr: "b.latch-peers:7401"}}
	c.Join, c.HTTPHosts = "https://latch:7402", []string{"Latch.NS.svc."}
	h, err := c.hosts()
	if got, want := strings.Join(h.Names(), ","), "a.http.example,a.latch-peers,latch,latch.ns.svc"; err != nil || got != want {
		t.Fatalf("names %s, %v; want %s", got, err, want)
	}
	if h.Allows("b.latch-peers:7402") || !h.Allows("latch:7402") {
		t.Fatal("another member's name passes, or the --join Service's does not")
	}
}

// With any credential, the peer port and admin calls need their own; clients may stay open.
func TestValidatePrincipals(t *testing.T) {
	for _, c := range []struct {
		client, peer, admin bool
		want                error
	}{
		{false, false, false, nil},
		{true, true, true, nil},
		{false, true, true, nil}, // clients may stay open where --listen allows
		{true, false, false, errPeerUnauthenticated},
		{true, false, true, errPeerUnauthenticated},
		{false, false, true, errPeerUnauthenticated},
		{true, true, false, errAdminUnauthenticated},
		{false, true, false, errAdminUnauthenticated},
	} {
		cfg := DefaultConfig()
		cfg.Raft.ID, cfg.Raft.DataDir, cfg.Listen, cfg.HTTP = "n1", t.TempDir(), "127.0.0.1:7401", "127.0.0.1:7402"
		if c.client {
			cfg.Server.Secrets = [][]byte{[]byte("client-secret-0123456789abcdef0123")}
		}
		if c.peer {
			cfg.Peer.Secrets = [][]byte{[]byte("peer-secret-0123456789abcdef012345")}
		}
		if c.admin {
			cfg.Admin.AdminSecrets = [][]byte{[]byte("admin-secret-0123456789abcdef01234")}
		}
		if err := cfg.Validate(); err != c.want {
			t.Errorf("client %v, peer %v, admin %v: %v, want %v", c.client, c.peer, c.admin, err, c.want)
		}
	}
}

// A node with no raft state needs a way in: --initial-cluster, --join or --bootstrap; with
// none ValidateStart names all three (Validate alone does not: Start lets it wait).
func TestValidateStartNeedsAWayIn(t *testing.T) {
	c := DefaultConfig()
	c.Raft.ID, c.Raft.DataDir, c.Listen, c.HTTP = "n1", t.TempDir(), "127.0.0.1:7401", "127.0.0.1:7402"
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	err := c.ValidateStart()
	if err == nil || !strings.Contains(err.Error(), "--initial-cluster") || !strings.Contains(err.Error(), "--join") || !strings.Contains(err.Error(), "--bootstrap") {
		t.Fatalf("ValidateStart with no way in: %v, want the three options", err)
	}
	c.Join = "127.0.0.1:1"
	if err := c.ValidateStart(); err != nil {
		t.Fatalf("ValidateStart with --join: %v", err)
	}
}
