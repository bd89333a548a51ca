package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The audit trail of real processes (--audit, --log-format json): through a follower
// (expectAuditThrough), and across builds (startMixedCluster runs every node with --audit).
// A follower of this build asks the leader on each forward connection whether it wants its
// clients' addresses (cluster/origins.go); a leader of the previous build echoes the
// question, as it answers every ping, and a follower of the previous build never asks.
// Either way the leader audits a forwarded request as before, from "peer ADDR". Only a
// leader of this build with followers of this build names the client and the follower
// (from=CLIENT via=ID).

// auditOf returns the audit lines in p's log (logger latch.audit; --log-format json).
func auditOf(p *proc) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(line, `"latch.audit"`) {
			continue
		}
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["@module"] == "latch.audit" {
			out = append(out, l)
		}
	}
	return out
}

// auditCounts counts node l's grant lines by where they came from: through a follower that
// did not name the client (from "peer ADDR"), from a client of l itself, and from a named
// client of a follower (with via, which must be one of the other nodes).
func (tc *testCluster) auditCounts(l int) (peer, direct, named int, bad []string) {
	for _, a := range auditOf(tc.procs[l]) {
		if a["event"] != "grant" {
			continue
		}
		from, _ := a["from"].(string)
		via, _ := a["via"].(string)
		switch {
		case via != "":
			named++
			if strings.HasPrefix(from, "peer ") || via == fmt.Sprintf("n%d", l+1) || !strings.HasPrefix(via, "n") {
				bad = append(bad, fmt.Sprint(a))
			}
		case strings.HasPrefix(from, "peer "):
			peer++
		case from != "":
			direct++
		default:
			bad = append(bad, fmt.Sprint(a))
		}
	}
	return peer, direct, named, bad
}

// expectAuditAcrossBuilds fails unless leader l, whose followers run the other build,
// audited forwarded grants from their peer connections as before, grants of its own
// clients from their addresses, and named no follower's client.
func (tc *testCluster) expectAuditAcrossBuilds(l int) {
	tc.t.Helper()
	peer, direct, named, bad := tc.auditCounts(l)
	if peer == 0 || direct == 0 || named != 0 || len(bad) > 0 {
		tc.t.Errorf("n%d's audit trail: %d forwarded grants from a peer connection, %d of its own clients, %d of named "+
			"clients of a follower, malformed %v; want some of the first two and none named (the followers run the other build)",
			l+1, peer, direct, named, bad)
	}
}

// expectAuditNamesClients fails unless leader l, of this build with followers of this build,
// audited grants forwarded by its followers with the client's address and the follower.
func (tc *testCluster) expectAuditNamesClients(l int) {
	tc.t.Helper()
	peer, direct, named, bad := tc.auditCounts(l)
	if named == 0 || len(bad) > 0 {
		tc.t.Errorf("n%d's audit trail: %d forwarded grants from a peer connection, %d of its own clients, %d of named "+
			"clients of a follower, malformed %v; want grants of named clients (every node runs this build)",
			l+1, peer, direct, named, bad)
	}
}

// expectAuditThrough fails unless leader l's audit trail has key's grants and its forced
// release as made through follower f: each grant from a client address (not the follower's
// peer connection) via f, the forced release from the operator's address via f, with the
// admin secret's fingerprint.
func (tc *testCluster) expectAuditThrough(l, f int, key string) {
	tc.t.Helper()
	via := fmt.Sprintf("n%d", f+1)
	grants, forced := 0, 0
	for _, a := range auditOf(tc.procs[l]) {
		if a["key"] != key {
			continue
		}
		from, _ := a["from"].(string)
		switch a["event"] {
		case "grant":
			grants++
			if !strings.HasPrefix(from, "127.0.0.1:") || a["via"] != via {
				tc.t.Errorf("n%d audited a grant through %s as %v: want from the client's address, via %s", l+1, via, a, via)
			}
		case "force_release":
			forced++
			cred, _ := a["cred"].(string)
			if !strings.HasPrefix(from, "operator 127.0.0.1:") || a["via"] != via || !strings.HasPrefix(cred, "admin secret ") {
				tc.t.Errorf("n%d audited a forced release through %s as %v: want from the operator's address, via %s, "+
					"and the admin secret's fingerprint", l+1, via, a, via)
			}
		}
	}
	if grants < 2 || forced != 1 {
		tc.t.Errorf("n%d's audit trail has %d grants and %d forced releases of %s, want 2 (the holder, then the waiter) and 1",
			l+1, grants, forced, key)
	}
}
