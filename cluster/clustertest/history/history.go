// Package history records what a fault-injection run did, on one monotonic clock, and
// checks the record afterwards (Check) and sums it up (Summarize). It is pure Go: no
// processes, no network; the chaos runner in cmd/latch feeds it, and its own tests feed it
// planted violations.
//
// Every time in a History is a time.Duration since the Recorder's start, taken from
// time.Now's monotonic reading (time.Since, time.Time.Sub), so wall-clock steps cannot
// reorder it. A Ticket.Deadline (and CurrentDeadline) from package client carries the same
// process's monotonic reading, so Recorder.Rel places it on the same clock.
//
// Holders may extend their tickets (protocol revision 2): every Extend call is an Op of its
// own, and a believed hold lasts to the deadline its confirmed extends set (Holds).
package history

import (
	"sync"
	"time"
)

// OpKind is what a client asked for.
type OpKind string

// Op kinds.
const (
	Acquire OpKind = "acquire"
	Release OpKind = "release"
	Extend  OpKind = "extend" // Ticket.Extend of a granted ticket (protocol revision 2)
)

// Result is how an operation ended, as the client reported it.
type Result string

// Results: one per error class of package client that a workload can see.
const (
	OK            Result = "ok"            // acquire: granted (a Ticket); release: R
	Timeout       Result = "timeout"       // definitely not acquired / not released
	Unavailable   Result = "unavailable"   // definitely not applied: no server could take it
	Busy          Result = "busy"          // definitely not acquired: admission closed
	Indeterminate Result = "indeterminate" // may or may not have been applied
	NotHeld       Result = "not_held"      // release or extend: N (an extend's ticket is lost)
	Unsupported   Result = "unsupported"   // extend: definitely not extended, revision 2 not served
	Ended         Result = "ended"         // extend: the ticket had ended (nothing sent), or the L came after its deadline
	Other         Result = "other"         // anything else (a bug somewhere; Err says what)
)

// Op is one client operation: invoked at Start, answered at End.
type Op struct {
	Worker int    `json:"worker"`
	Kind   OpKind `json:"kind"`
	Key    string `json:"key"`
	// Start is when the call was made (for a release: when it was sent, as the holder
	// stopped believing it holds), End when its answer was received.
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// Result and, when not OK, Why (a short class of the cause, for the summary) and Err
	// (the client's message).
	Result Result `json:"result"`
	Why    string `json:"why,omitempty"`
	Err    string `json:"err,omitempty"`
	// Token is the granted token (acquire OK), the token released (release) or extended
	// (extend).
	Token uint64 `json:"token,omitempty"`
	// Deadline is the ticket's deadline as the client reports it: of the grant (acquire OK:
	// Ticket.Deadline), of the ticket when the release was sent (release:
	// Ticket.CurrentDeadline), or of the ticket right after the extend's answer (extend:
	// Ticket.CurrentDeadline; for a confirmed extend, that attempt's written_at + lease x
	// (1 - rho)).
	Deadline time.Duration `json:"deadline,omitempty"`
	// Lease is the lease an extend asked for.
	Lease time.Duration `json:"lease,omitempty"`
	// Resent: a release whose answer came to a resend (the client sent it again after its
	// connection was lost); an N may then be its own first attempt's doing.
	Resent bool `json:"resent,omitempty"`
}

// Fault is one fault the nemesis injected at Start and healed at Heal (the restart,
// resume or reconnect moment); Heal is 0 if it was never healed. Leader, if not 0, is when
// the nemesis first saw every node agree on one leader after the heal. Failed: a step of the
// fault the cluster should have taken did not succeed (a membership change refused, a new
// node never made a voter); Detail says which.
type Fault struct {
	Kind   string        `json:"kind"`
	Nodes  []string      `json:"nodes"`
	Start  time.Duration `json:"start"`
	Heal   time.Duration `json:"heal"`
	Leader time.Duration `json:"leader,omitempty"`
	Detail string        `json:"detail,omitempty"`
	Failed bool          `json:"failed,omitempty"`
}

// NodeStart is one start of a node process, at At: OK once it served (after Took), or
// not, with Detail saying why (it exited, it did not serve in time).
type NodeStart struct {
	Node   string        `json:"node"`
	At     time.Duration `json:"at"`
	Took   time.Duration `json:"took"`
	OK     bool          `json:"ok"`
	Detail string        `json:"detail,omitempty"`
}

// LeaderView is what one node's status said about leadership at At: its own id (Node), its
// raft State, its Term and the leader it names in that term (Leader; "" for none). A runner
// samples every node's status all through a run and records a view each time one changes.
type LeaderView struct {
	At     time.Duration `json:"at"`
	Node   string        `json:"node"`
	State  string        `json:"state"`
	Term   uint64        `json:"term"`
	Leader string        `json:"leader,omitempty"`
}

// Claims reports whether v is a node's claim to lead its term: it is in raft's Leader state
// and names itself.
func (v LeaderView) Claims() bool { return v.State == "Leader" && v.Leader == v.Node && v.Node != "" }

// ResourceSample is what one node's process used at At (a soak run samples every node about
// every 30 s, between faults): Slot names the node's place in the lab (its id at the
// start), PID its process, RSS its resident set in KiB (/proc/PID/status VmRSS; RSSAnon and
// RSSFile its anonymous and file-backed parts), FDs its open descriptors (/proc/PID/fd),
// Goroutines its /metrics go_goroutines (-1: the node did not answer), Leading whether it
// led then (a leader runs more goroutines and holds more connections than a follower).
type ResourceSample struct {
	At         time.Duration `json:"at"`
	Slot       string        `json:"slot"`
	PID        int           `json:"pid"`
	RSS        int64         `json:"rss_kib"`
	RSSAnon    int64         `json:"rss_anon_kib,omitempty"`
	RSSFile    int64         `json:"rss_file_kib,omitempty"`
	FDs        int           `json:"fds"`
	Goroutines int           `json:"goroutines"`
	Leading    bool          `json:"leading,omitempty"`
}

// NodeExit is a node process that exited at At without the runner stopping it (a crash,
// or a signal from elsewhere); State is how it ended (its exit status or signal).
type NodeExit struct {
	Node  string        `json:"node"`
	At    time.Duration `json:"at"`
	State string        `json:"state"`
}

// History is the whole record of a run, which ended at End. LeasesOn, if not 0, is when the
// runner first saw every node report protocol revision 2 switched on (the cluster's feature
// switch, without which every extend is answered unsupported).
type History struct {
	Seed      uint64           `json:"seed"`
	Nodes     int              `json:"nodes"`
	LeasesOn  time.Duration    `json:"leases_on,omitempty"`
	Ops       []Op             `json:"ops"`
	Faults    []Fault          `json:"faults"`
	Starts    []NodeStart      `json:"starts"`
	Exits     []NodeExit       `json:"exits,omitempty"`
	Leaders   []LeaderView     `json:"leaders,omitempty"`
	Resources []ResourceSample `json:"resources,omitempty"`
	End       time.Duration    `json:"end"`
}

// Recorder collects a History from many goroutines. Its clock starts at NewRecorder.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	h     History
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder(seed uint64, nodes int) *Recorder {
	return &Recorder{start: time.Now(), h: History{Seed: seed, Nodes: nodes}}
}

// Now is the recorder's clock: the time since it started, on the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Rel places t (a time.Now reading of this process, or one derived from it such as a
// Ticket.Deadline) on the recorder's clock.
func (r *Recorder) Rel(t time.Time) time.Duration { return t.Sub(r.start) }

// AddOp records an operation.
func (r *Recorder) AddOp(op Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Ops = append(r.h.Ops, op)
}

// AddFault records a fault.
func (r *Recorder) AddFault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, f)
}

// SetLeasesOn records when every node was first seen serving protocol revision 2.
func (r *Recorder) SetLeasesOn(at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h.LeasesOn == 0 {
		r.h.LeasesOn = at
	}
}

// AddStart records a node start.
func (r *Recorder) AddStart(s NodeStart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Starts = append(r.h.Starts, s)
}

// AddExit records a node process that exited without the runner stopping it.
func (r *Recorder) AddExit(e NodeExit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Exits = append(r.h.Exits, e)
}

// AddLeaderView records what a node's status said about leadership.
func (r *Recorder) AddLeaderView(v LeaderView) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Leaders = append(r.h.Leaders, v)
}

// AddResources records a sample of a node's process.
func (r *Recorder) AddResources(s ResourceSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Resources = append(r.h.Resources, s)
}

// History returns a copy of what was recorded so far, ending now.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Ops = append([]Op(nil), r.h.Ops...)
	h.Faults = append([]Fault(nil), r.h.Faults...)
	h.Starts = append([]NodeStart(nil), r.h.Starts...)
	h.Exits = append([]NodeExit(nil), r.h.Exits...)
	h.Leaders = append([]LeaderView(nil), r.h.Leaders...)
	h.Resources = append([]ResourceSample(nil), r.h.Resources...)
	h.End = r.Now()
	return h
}
