package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/latchd/latch/cluster/buildinfo"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/wire"
)

// The admin verbs' text output (cmd/latch status, peers list, locks, recover): tables and
// lines for people; the verbs' --json prints the API's JSON instead.

// WriteStatus writes GET /v1/status (st, as decoded into its top-level fields) as a table:
// the mode, the build (a node from before /v1/status had one shows none), in cluster mode this node's raft view (id, role, leader, term, indexes, last
// contact, the peers sorted by id), then the last token, held keys and waiters.
func WriteStatus(out io.Writer, st map[string]json.RawMessage) error {
	var mode string
	var node map[string]any
	json.Unmarshal(st["mode"], &mode)
	json.Unmarshal(st["node"], &node)
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintf(w, "mode\t%s\n", mode)
	var build buildinfo.Info
	if json.Unmarshal(st["build"], &build) == nil && build.Version != "" {
		fmt.Fprintf(w, "version\t%s (revision %s, built %s, %s)\n", build.Version, build.Revision, build.Date, build.Go)
	}
	if raw, ok := st["raft"]; ok {
		var m map[string]any
		json.Unmarshal(raw, &m)
		get := func(k string) any { return m[k] }
		leader := "none known"
		if id, _ := m["leader_id"].(string); id != "" {
			leader = fmt.Sprintf("%s (%v)", id, get("leader_addr"))
		}
		contact := fmt.Sprint(get("last_contact")) // with a leader; raft keeps the zero time on one
		if t, err := time.Parse(time.RFC3339Nano, contact); err == nil && t.IsZero() {
			contact = "never"
			if get("state") == "Leader" {
				contact = "- (this node leads)"
			}
		}
		fmt.Fprintf(w, "id\t%v\nrole\t%v\nleader\t%s\nterm\t%v\ncommit index\t%v\napplied index\t%v\nlast contact\t%v\n",
			get("id"), get("state"), leader, get("term"), get("commit_index"), get("applied_index"), contact)
		var peers []Member
		if p, ok := m["peers"]; ok {
			b, _ := json.Marshal(p)
			json.Unmarshal(b, &peers)
		}
		sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
		for _, p := range peers {
			fmt.Fprintf(w, "peer\t%s %s %s\n", p.ID, p.Addr, p.Suffrage)
		}
	}
	fmt.Fprintf(w, "last token\t%v\nkeys\t%v\nwaiters\t%v\n", node["last_token"], node["keys"], node["waiters"])
	return w.Flush()
}

// WriteMembers writes the members as a table: ID, ADDR, SUFFRAGE.
func WriteMembers(out io.Writer, ms []Member) error {
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tADDR\tSUFFRAGE")
	for _, m := range ms {
		fmt.Fprintf(w, "%s\t%s\t%s\n", m.ID, m.Addr, m.Suffrage)
	}
	return w.Flush()
}

// LockTable writes locks as they come, as a table (KEY, TOKEN, LEASE LEFT, WAITERS) that it
// flushes every DefaultLocksPage rows, so a million keys are never held in it at once; or,
// asJSON, as one JSON object per lock and line.
type LockTable struct {
	w   *tabwriter.Writer
	enc *json.Encoder // asJSON
	n   int
}

// NewLockTable returns a table that writes to out; its header (none asJSON) comes with the
// first row, or with Flush for an empty table, so that a listing that fails before its
// first page writes nothing.
func NewLockTable(out io.Writer, asJSON bool) *LockTable {
	if asJSON {
		return &LockTable{enc: json.NewEncoder(out)}
	}
	return &LockTable{w: tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)}
}

// Rows is how many locks were added.
func (t *LockTable) Rows() int { return t.n }

func (t *LockTable) header() {
	if t.n == 0 {
		fmt.Fprintln(t.w, "KEY\tTOKEN\tLEASE LEFT\tWAITERS")
	}
}

// Add writes one lock's row (or object).
func (t *LockTable) Add(lk Lock) error {
	if t.enc != nil {
		t.n++
		return t.enc.Encode(lk)
	}
	t.header()
	fmt.Fprintf(t.w, "%s\t%d\t%s%s\t%d\n", wire.KeyText(lk.Key), lk.Token, leaseLeft(lk.LeaseLeft), releasing(lk), lk.Waiters)
	if t.n++; t.n%DefaultLocksPage == 0 {
		return t.w.Flush()
	}
	return nil
}

// Flush writes the rows not written yet.
func (t *LockTable) Flush() error {
	if t.w == nil {
		return nil
	}
	t.header()
	return t.w.Flush()
}

// String is the lock on one line: free with its waiters, or held with its token, lease left
// (to the millisecond) and waiters, and whether it is being released.
func (lk Lock) String() string {
	if !lk.Held {
		return fmt.Sprintf("%s free (waiters %d)", wire.KeyText(lk.Key), lk.Waiters)
	}
	return fmt.Sprintf("%s held token %d lease left %s waiters %d%s", wire.KeyText(lk.Key), lk.Token, leaseLeft(lk.LeaseLeft), lk.Waiters, releasing(lk))
}

func leaseLeft(s float64) string {
	return (time.Duration(s*float64(time.Second)) / time.Millisecond * time.Millisecond).String()
}

func releasing(lk Lock) string {
	if lk.Releasing {
		return " (releasing)"
	}
	return ""
}

// WriteDiskState writes what a stopped node's data directory holds (latch recover, named
// what: the directory, "before" or "after") on one line: the last index and term, the last
// token, the held keys and the members; then one line per damage, which is why latch server
// refuses the directory (recover keeps what it holds).
func WriteDiskState(out io.Writer, what string, ds raftnode.DiskState) error {
	fmt.Fprintf(out, "%s: last index %d (term %d), last token %d, %d held keys, members:",
		what, ds.LastIndex, ds.LastTerm, uint64(ds.State.LastToken), ds.State.Keys)
	for _, s := range ds.Servers {
		fmt.Fprintf(out, " %s=%s(%s)", s.ID, s.Addr, s.Suffrage)
	}
	fmt.Fprintln(out)
	for _, d := range ds.Damage {
		fmt.Fprintf(out, "damage: %s\n", d)
	}
	return nil
}
