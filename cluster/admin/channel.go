package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/cluster/raftnode"
	"github.com/latchd/latch/fsm"
)

// The admin channel of the peer port carries what a node asks another node directly: a
// follower forwards membership changes, backups and restores to the leader, and a node about
// to bootstrap asks the other initial members what they hold. cluster/peer authenticates the
// connection (peer secret or mutual TLS), so requests carry no signature of their own.
//
// One request per connection: a JSON line (ChannelRequest), followed for "restore" by Size
// bytes of backup; the answer is a JSON line (channelResponse), followed for "snapshot" by
// Size bytes of backup. A size is only a claim: the reader's buffer grows with the bytes
// that arrive (readClaimed), never to the size announced before they do.
//
// A failed call's answer carries the whole of the answering node's verdict: its message,
// the error's outcome and the HTTP status its own endpoint answers with, so that the node
// that forwarded the call answers exactly what the leader would (400 stays 400, 409 stays
// 409; relayed). The fields are new with this build; the flags before them are still sent,
// and read when the fields are absent, so that nodes of both builds understand each other
// during a rolling upgrade.

// ChannelRequest is one request on the admin channel.
type ChannelRequest struct {
	Op    string `json:"op"` // "add", "remove", "snapshot", "restore" or "state"
	ID    string `json:"id,omitempty"`
	Addr  string `json:"addr,omitempty"`
	Voter bool   `json:"voter,omitempty"`
	Floor uint64 `json:"floor,omitempty"` // restore: the requested token floor
	Size  int64  `json:"size,omitempty"`  // restore: bytes of backup after the request line
	// Lock inspection ("locks", "lock") and forced release ("force-release").
	Key    string `json:"key,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	// Caller is who made the call that the follower relays (its HTTP remote address, its
	// credential's id, the follower's --id), for the leader's log and audit trail. New with
	// this build: a leader of an older one ignores it, and one of this build logs a request
	// without it (from an older follower) as before.
	Caller *Caller `json:"caller,omitempty"`
}

type channelResponse struct {
	Error string `json:"error,omitempty"`
	// Status is the HTTP status this node's own endpoint answers the error with (opStatus),
	// and Outcome the error's outcome (absent when it carries none): the node that forwarded
	// the call answers exactly that status, and its error has that outcome (relayed). A latch
	// before these two fields sends neither and ignores them; the flags below stay, sent as
	// before, for such a latch on either end.
	Status  int          `json:"status,omitempty"`
	Outcome outcome.Kind `json:"outcome,omitempty"`
	// NotFound: the error is ErrNotFound.
	NotFound bool `json:"not_found,omitempty"`
	// MaybeApplied: the error is outcome.Indeterminate (the change may have happened).
	MaybeApplied bool               `json:"maybe_applied,omitempty"`
	Size         int64              `json:"size,omitempty"` // snapshot: bytes of backup after the line
	Info         *fsm.SnapshotInfo  `json:"info,omitempty"`
	Restored     *raftnode.Restored `json:"restored,omitempty"`
	State        *NodeState         `json:"state,omitempty"`
	Page         *LockPage          `json:"page,omitempty"`
	Lock         *Lock              `json:"lock,omitempty"`
	Freed        uint64             `json:"freed,omitempty"`
	NotHeld      bool               `json:"not_held,omitempty"` // the error is ErrNotHeld
}

// NodeState is what a node tells a peer that is deciding whether to bootstrap.
type NodeState struct {
	ID        string `json:"id"`
	LastIndex uint64 `json:"last_index"` // its last raft log index; 0 while it has no raft state
	// Starting: this node has no raft state and is itself waiting to bootstrap.
	Starting bool `json:"starting,omitempty"`
	// Servers is this node's latest Raft configuration (empty while it has none), for a
	// member that lags behind a membership change and asks whether a sender it does not know
	// is a member (raftnode.Config.Vouch).
	Servers []raftnode.Server `json:"servers,omitempty"`
	// Leading and Commit: whether this node leads (leadership established) and its commit
	// index, for a follower's readiness (raftnode.Config.LeaderCommit). Commit is nil only
	// from a latch older than these fields (and there Leading is always false).
	Leading bool    `json:"leading,omitempty"`
	Commit  *uint64 `json:"commit_index,omitempty"`
}

// HasHistory reports whether the node has raft history beyond a bootstrap configuration:
// a cluster exists there (every elected leader appends at least one entry after it).
func (s NodeState) HasHistory() bool { return s.LastIndex > 1 }

// MaxSnapshot bounds a backup sent to or through a node (1 GiB: some 5 million held keys).
const MaxSnapshot = 1 << 30

// ServeChannel answers requests on ln (the admin channel's listener) with local, which must
// act on this node without forwarding again. It returns when ln is closed.
func ServeChannel(ln net.Listener, local Cluster, log hclog.Logger) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go serveChannelConn(conn, local, log)
	}
}

func serveChannelConn(conn net.Conn, local Cluster, log hclog.Logger) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(callTimeout + 5*time.Second))
	br := bufio.NewReader(conn)
	line, err := readLine(br, maxBody)
	if err != nil {
		return
	}
	var req ChannelRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return
	}
	timeout := callTimeout
	if req.Op == "snapshot" || req.Op == "restore" {
		timeout = transferTimeout
	}
	conn.SetDeadline(time.Now().Add(timeout + 5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if req.Caller != nil {
		ctx = WithCaller(ctx, *req.Caller)
	}
	var resp channelResponse
	var payload []byte
	switch req.Op {
	case "add":
		err = local.AddMember(ctx, req.ID, req.Addr, req.Voter)
	case "remove":
		err = local.RemoveMember(ctx, req.ID)
	case "state":
		var st NodeState
		if st, err = local.State(); err == nil {
			resp.State = &st
		}
	case "snapshot":
		var buf bytes.Buffer
		var info fsm.SnapshotInfo
		if info, err = local.Backup(ctx, &buf); err == nil {
			resp.Info, resp.Size, payload = &info, int64(buf.Len()), buf.Bytes()
		}
	case "restore":
		if req.Size <= 0 || req.Size > MaxSnapshot {
			err = fmt.Errorf("admin: backup size %d out of range (1..%d)", req.Size, MaxSnapshot)
			break
		}
		var data []byte
		if data, err = readClaimed(br, req.Size); err != nil { // grows as the bytes come
			return
		}
		var res raftnode.Restored
		res, err = local.Restore(ctx, data, req.Floor)
		resp.Restored = &res
	case "locks", "lock", "force-release":
		err = serveLocks(ctx, local, req, &resp)
	default:
		err = errors.New("admin: unknown channel op " + req.Op)
	}
	if err != nil {
		resp.Error, resp.Status = err.Error(), opStatus(req.Op, err)
		resp.Outcome, _ = outcome.Of(err)
		resp.NotFound, resp.NotHeld = errors.Is(err, ErrNotFound), errors.Is(err, ErrNotHeld)
		resp.MaybeApplied = errors.Is(err, outcome.Indeterminate)
	}
	switch req.Op {
	case "state", "locks", "lock": // reads of no interest to an audit (a backup is logged)
	default:
		log.Info("admin channel request", append([]any{"op", req.Op, "id", req.ID, "key", req.Key, "error", resp.Error}, CallerOf(ctx).args()...)...)
	}
	out, _ := json.Marshal(resp)
	if _, err := conn.Write(append(out, '\n')); err == nil && len(payload) > 0 {
		conn.Write(payload)
	}
}

// maxAnswerLine bounds an answer's line: a page of cluster.MaxLocksPage locks with the
// longest keys, every byte escaped, is under 1 MiB. Requests stay within maxBody.
const maxAnswerLine = 8 << 20

// readOnly reports whether a channel op only reads: "state", "locks", "lock" and "snapshot"
// (a backup) change nothing.
func readOnly(op string) bool {
	switch op {
	case "state", "locks", "lock", "snapshot":
		return true
	}
	return false
}

// readLine reads one request or answer line of at most limit bytes; the buffer grows with
// the bytes that arrive.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := br.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > limit {
			return nil, fmt.Errorf("admin: channel line longer than %d bytes", limit)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

// call sends req (and payload) over conn and reads the answer (and its payload). conn is
// closed when it returns.
func call(ctx context.Context, conn net.Conn, req ChannelRequest, payload []byte) (channelResponse, []byte, error) {
	defer conn.Close()
	var resp channelResponse
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	if c := CallerOf(ctx); c != (Caller{}) && req.Caller == nil {
		req.Caller = &c // who made the call this node relays (Relayed)
	}
	line, err := json.Marshal(req)
	if err != nil {
		return resp, nil, err
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return resp, nil, err
	}
	if len(payload) > 0 {
		if _, err := conn.Write(payload); err != nil {
			return resp, nil, err
		}
	}
	// A read that got no answer changed nothing: asking again is safe, and its outcome is no
	// mystery. A change may have happened.
	unknown := outcome.Indeterminate
	if readOnly(req.Op) {
		unknown = outcome.Unavailable
	}
	br := bufio.NewReader(conn)
	if line, err = readLine(br, maxAnswerLine); err != nil {
		return resp, nil, outcome.New(unknown, errors.New("admin: no answer from the peer after the request was sent: "+err.Error()))
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return resp, nil, outcome.New(unknown, fmt.Errorf("admin: bad answer from the peer: %w", err))
	}
	if resp.Error != "" {
		return resp, nil, relayedOf(resp)
	}
	if resp.Size < 0 || resp.Size > MaxSnapshot {
		return resp, nil, fmt.Errorf("admin: the peer announced %d bytes", resp.Size)
	}
	var body []byte
	if resp.Size > 0 {
		var err error
		if body, err = readClaimed(br, resp.Size); err != nil { // grows as the bytes come
			return resp, nil, fmt.Errorf("admin: backup cut short: %w", err)
		}
	}
	return resp, body, nil
}

// relayed is the error a peer answered a channel call with, as it gave it: its message, its
// outcome (0: none), the HTTP status its own endpoint answers it with (0 from a latch that
// does not send it: statusOf then decides from the rest, as that latch's peers did), and
// whether it is ErrNotFound or ErrNotHeld. errors.Is matches those and the outcome
// (outcome.Kind.Is), so outcome.Of reads the outcome too.
type relayed struct {
	msg               string
	kind              outcome.Kind
	status            int
	notFound, notHeld bool
}

// relayedOf is resp's error. From a latch before Outcome, MaybeApplied says Indeterminate.
func relayedOf(resp channelResponse) *relayed {
	r := &relayed{msg: resp.Error, kind: resp.Outcome, status: resp.Status, notFound: resp.NotFound, notHeld: resp.NotHeld}
	if r.kind == 0 && resp.MaybeApplied {
		r.kind = outcome.Indeterminate
	}
	return r
}

func (r *relayed) Error() string { return r.msg }

func (r *relayed) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return r.notFound
	case ErrNotHeld:
		return r.notHeld
	}
	return r.kind != 0 && r.kind.Is(target)
}

// serveLocks answers a lock inspection or forced release with local's Locks.
func serveLocks(ctx context.Context, local Cluster, req ChannelRequest, resp *channelResponse) error {
	l, ok := local.(Locks)
	if !ok {
		return errors.New("admin: this node serves no lock inspection")
	}
	switch req.Op {
	case "locks":
		p, err := l.List(ctx, req.Prefix, req.After, req.Limit)
		resp.Page = &p
		return err
	case "lock":
		lk, err := l.Show(ctx, req.Key)
		resp.Lock = &lk
		return err
	default:
		tok, err := l.Release(ctx, req.Key, req.Token)
		resp.Freed = tok
		return err
	}
}

// CallLocks sends a lock inspection or forced release (req.Op "locks", "lock" or
// "force-release") over conn (a dialed admin channel to the leader). conn is closed when it
// returns.
func CallLocks(ctx context.Context, conn net.Conn, req ChannelRequest) (LockPage, Lock, uint64, error) {
	resp, _, err := call(ctx, conn, req, nil)
	if err != nil {
		return LockPage{}, Lock{}, 0, err
	}
	var p LockPage
	var lk Lock
	if resp.Page != nil {
		p = *resp.Page
	}
	if resp.Lock != nil {
		lk = *resp.Lock
	}
	return p, lk, resp.Freed, nil
}

// CallChannel sends a membership change (Op "add" or "remove") over conn (a dialed admin
// channel to the leader) and waits for the outcome. conn is closed when it returns.
func CallChannel(ctx context.Context, conn net.Conn, req ChannelRequest) error {
	_, _, err := call(ctx, conn, req, nil)
	return err
}

// CallBackup asks the node behind conn for a backup and writes it to w.
func CallBackup(ctx context.Context, conn net.Conn, w io.Writer) (fsm.SnapshotInfo, error) {
	resp, body, err := call(ctx, conn, ChannelRequest{Op: "snapshot"}, nil)
	if err != nil {
		return fsm.SnapshotInfo{}, err
	}
	if resp.Info == nil {
		return fsm.SnapshotInfo{}, errors.New("admin: the peer sent a backup without its description")
	}
	_, err = w.Write(body)
	return *resp.Info, err
}

// CallRestore sends a backup to the node behind conn to restore, with floor.
func CallRestore(ctx context.Context, conn net.Conn, data []byte, floor uint64) (raftnode.Restored, error) {
	resp, _, err := call(ctx, conn, ChannelRequest{Op: "restore", Floor: floor, Size: int64(len(data))}, data)
	if err != nil {
		return raftnode.Restored{}, err
	}
	if resp.Restored == nil {
		return raftnode.Restored{}, errors.New("admin: the peer answered a restore without its outcome")
	}
	return *resp.Restored, nil
}

// CallState asks the node behind conn what it holds.
func CallState(ctx context.Context, conn net.Conn) (NodeState, error) {
	resp, _, err := call(ctx, conn, ChannelRequest{Op: "state"}, nil)
	if err != nil {
		return NodeState{}, err
	}
	if resp.State == nil {
		return NodeState{}, errors.New("admin: the peer answered without its state")
	}
	return *resp.State, nil
}
