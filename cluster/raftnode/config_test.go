package raftnode

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	oc "github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
)

func TestConfigValidate(t *testing.T) {
	_, tr := raft.NewInmemTransport("a")
	base := func() Config {
		c := DefaultConfig()
		c.ID, c.DataDir, c.Transport = "a", t.TempDir(), tr
		return c
	}
	three := []Peer{{"a", "h0:1"}, {"b", "h1:1"}, {"c", "h2:1"}}
	cases := []struct {
		name string
		mut  func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero durations take defaults", func(c *Config) { *c = Config{ID: "a", DataDir: c.DataDir, Transport: tr} }, ""},
		{"stream instead of transport", func(c *Config) { c.Transport, c.Stream = nil, nilStream{} }, ""},
		{"initial cluster", func(c *Config) { c.InitialCluster = three }, ""},
		{"initial cluster, matching advertise", func(c *Config) { c.InitialCluster, c.Advertise = three, "h0:1" }, ""},
		{"max floor", func(c *Config) { c.TokenFloor = uint64(fsm.MaxToken) }, ""},
		{"no id", func(c *Config) { c.ID = "" }, "ID is empty"},
		{"no dir", func(c *Config) { c.DataDir = "" }, "DataDir is empty"},
		{"no transport", func(c *Config) { c.Transport = nil }, "neither Transport nor Stream"},
		{"bootstrap and initial", func(c *Config) { c.Bootstrap, c.InitialCluster = true, three }, "both Bootstrap and InitialCluster"},
		{"self missing", func(c *Config) { c.InitialCluster = three[1:] }, `does not list this node's ID "a"`},
		{"duplicate id", func(c *Config) { c.InitialCluster = append(three, Peer{"b", "h3:1"}) }, `ID "b" twice`},
		{"duplicate addr", func(c *Config) { c.InitialCluster = append(three, Peer{"d", "h1:1"}) }, `address "h1:1" twice`},
		{"empty peer", func(c *Config) { c.InitialCluster = append(three, Peer{"d", ""}) }, "empty ID or address"},
		{"advertise differs", func(c *Config) { c.InitialCluster, c.Advertise = three, "other:1" }, "use the same address"},
		{"floor too high", func(c *Config) { c.TokenFloor = uint64(fsm.MaxToken) + 1 }, "TokenFloor"},
		{"heartbeat too short", func(c *Config) { c.HeartbeatTimeout = time.Millisecond }, "HeartbeatTimeout 1ms is too short"},
		{"lease over heartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * time.Second }, "LeaderLeaseTimeout"},
		{"election under heartbeat", func(c *Config) { c.ElectionTimeout = 500 * time.Millisecond }, "ElectionTimeout"},
		{"negative batch", func(c *Config) { c.MaxBatch = -1 }, "MaxBatch -1"},
		{"negative window", func(c *Config) { c.MaxInFlight = -1 }, "MaxInFlight -1"},
		{"queue under batch", func(c *Config) { c.MaxQueue = 10 }, "MaxQueue 10 is smaller than MaxBatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mut(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("no error, want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if tc.want != "" {
				if _, err := Open(c); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open: %v, want %q", err, tc.want)
				}
			}
		})
	}
}

type nilStream struct{ raft.StreamLayer }

func TestClassify(t *testing.T) {
	other := errors.New("bolt: disk on fire")
	cases := []struct {
		err       error
		index     uint64
		want      error // oc.Unavailable, oc.Indeterminate or nil
		notLeader bool
	}{
		{nil, 0, nil, false},
		{raft.ErrNotLeader, 0, oc.Unavailable, true},
		{raft.ErrLeadershipTransferInProgress, 0, oc.Unavailable, false},
		{raft.ErrEnqueueTimeout, 0, oc.Unavailable, false},
		{raft.ErrRaftShutdown, 0, oc.Unavailable, false},
		{raft.ErrRaftShutdown, 7, oc.Indeterminate, false},
		{raft.ErrLeadershipLost, 0, oc.Indeterminate, false},
		{raft.ErrLeadershipLost, 7, oc.Indeterminate, false},
		{raft.ErrAbortedByRestore, 7, oc.Indeterminate, false},
		{fmt.Errorf("unable to store logs within log store: %w", other), 7, oc.Indeterminate, false},
		{ErrTimeout, 0, oc.Indeterminate, false},
	}
	for _, tc := range cases {
		got := classify(tc.err, tc.index)
		if tc.want == nil {
			if got != nil {
				t.Errorf("classify(nil) = %v", got)
			}
			continue
		}
		if !errors.Is(got, tc.want) || !exactlyOneOutcome(got) || !errors.Is(got, tc.err) {
			t.Errorf("classify(%v, %d) = %v, want %v wrapping the cause", tc.err, tc.index, got, tc.want)
		}
		if errors.Is(got, oc.NotLeader) != tc.notLeader {
			t.Errorf("classify(%v): NotLeader = %v, want %v", tc.err, !tc.notLeader, tc.notLeader)
		}
	}
}

func TestPackLen(t *testing.T) {
	q := func(groups ...int) []proposal {
		var out []proposal
		for _, g := range groups {
			out = append(out, proposal{group: g})
			for range g - 1 {
				out = append(out, proposal{})
			}
		}
		return out
	}
	cases := []struct {
		q    []proposal
		max  int
		want int
	}{
		{q(1, 1, 1), 2, 2},
		{q(1, 1, 1), 5, 3},
		{q(2, 2), 3, 2},    // a group never splits
		{q(1, 3, 1), 3, 1}, // the group waits for the next entry
		{q(3), 3, 3},
		{nil, 3, 0},
	}
	for _, tc := range cases {
		if got := packLen(tc.q, tc.max); got != tc.want {
			t.Errorf("packLen(%d items, %d) = %d, want %d", len(tc.q), tc.max, got, tc.want)
		}
	}
}
