package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/latchd/latch/cluster/clustertest/history"
)

// The chaos lab's membership faults, and the leader views every run records.
//
// replace-new removes a follower with `latch peers remove` (through the leader), stops it,
// and starts a new node in its place in the lab (its namespace and addresses) under a new id
// with an empty data directory and --join (the leader's --http): the cluster adds it as a
// nonvoter and gives it its vote once it has caught up. The fault heals when the new node
// starts; it is complete once the configuration has the new node as a voter, not the old
// one, and as many voters as the lab has nodes, and the new node has caught up.
//
// replace-same is the documented way back for a node whose disk was lost (deploy/README.md,
// "What survives what"): the node is killed (kill -9, the machine died) and its data
// directory deleted; it is removed with `latch peers remove` through the leader (a new one,
// if it led), and started again at once under its id with its flags and --join (the
// leader's --http): a listed initial member finds that the others have history and does not
// bootstrap, waits out its vote quarantine, and joins as a nonvoter that gets its vote once
// it has caught up. It is complete once the node is a voter again and has caught up. Any
// node may be the victim, the leader too. (Started empty while still a voter, as the
// procedure used to say, it can elect a leader without committed entries if the leader
// fails before it caught up: wiped_test.go.)
//
// Either fault keeps the cluster's size; a step that does not succeed marks the fault
// Failed, which TestClusterChaos reports.

// chaosViewEvery is how often every node's status is asked for its view of leadership.
const chaosViewEvery = 200 * time.Millisecond

// chaosMemberWait bounds the wait for a replaced node to be a voter and caught up.
const chaosMemberWait = 30 * time.Second

// watchLeaders asks every node for its status every chaosViewEvery, until the returned stop
// is called, and records a leader view each time a node's state, term or leader changed
// since its last answer (history.LeaderView; Check tests that no term has two leaders).
func (r *chaosRun) watchLeaders() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		last := make([]history.LeaderView, len(r.spec.Nodes))
		tk := time.NewTicker(chaosViewEvery)
		defer tk.Stop()
		for {
			var wg sync.WaitGroup
			for i := range r.spec.Nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := r.status(i)
					if err != nil {
						return
					}
					v := history.LeaderView{At: r.rec.Now(), Node: st.Raft.ID, State: st.Raft.State, Term: st.Raft.Term, Leader: st.Raft.LeaderID}
					if p := last[i]; p.Node == v.Node && p.State == v.State && p.Term == v.Term && p.Leader == v.Leader {
						return
					}
					last[i] = v
					r.rec.AddLeaderView(v)
				}()
			}
			wg.Wait()
			select {
			case <-quit:
				return
			case <-tk.C:
			}
		}
	}()
	return func() { close(quit); <-done }
}

// replaceNew is the replace-new fault (above) of a follower of leader l.
func (r *chaosRun) replaceNew(f history.Fault, l int) history.Fault {
	v := r.followers(l, 1)[0]
	n := r.nodes[v]
	old := n.spec.ID
	join := r.spec.Nodes[l].http()
	f.Nodes = []string{old}
	f.Start = r.rec.Now()
	n.expectExit() // once removed, it may stop by itself
	if out, err := r.latchCmd("peers", "remove", "--http", join, "--id", old, "--admin-secret-file", r.spec.Admin); err != nil {
		f.Heal, f.Failed = r.rec.Now(), true
		f.Detail = fmt.Sprintf("latch peers remove --id %s through %s: %v: %s", old, r.nodes[l].spec.ID, err, strings.TrimSpace(out))
		return f
	}
	f.Detail += r.stopNode(n)
	r.gen++
	id := fmt.Sprintf("%s-r%d", r.spec.Nodes[v].ID, r.gen)
	n.setArgs(r.spec, id, "", join)
	f.Nodes = append(f.Nodes, id)
	f.Heal = r.rec.Now()
	if !n.start() {
		f.Failed = true
		f.Detail += fmt.Sprintf("the new node %s did not start; ", id)
		return f
	}
	return r.awaitMember(f, v, old)
}

// replaceSame is the replace-same fault (above) of node v.
func (r *chaosRun) replaceSame(f history.Fault, v int) history.Fault {
	n := r.nodes[v]
	f.Nodes = []string{n.spec.ID}
	f.Start = r.rec.Now()
	n.kill(syscall.SIGKILL)
	if !n.waitExit(10 * time.Second) {
		f.Detail += n.spec.ID + " still running 10 s after SIGKILL; "
	}
	if err := os.RemoveAll(n.dataDir); err != nil {
		f.Detail += fmt.Sprintf("wiping %s: %v; ", n.dataDir, err)
	}
	l := r.leader(chaosLeaderSearchTime)
	if l < 0 {
		f.Heal, f.Failed = r.rec.Now(), true
		f.Detail += fmt.Sprintf("no agreed leader within %s of losing %s", chaosLeaderSearchTime, n.spec.ID)
		return f
	}
	join := r.spec.Nodes[l].http()
	if out, err := r.latchCmd("peers", "remove", "--http", join, "--id", n.spec.ID, "--admin-secret-file", r.spec.Admin); err != nil {
		f.Heal, f.Failed = r.rec.Now(), true
		f.Detail += fmt.Sprintf("latch peers remove --id %s through %s: %v: %s", n.spec.ID, r.nodes[l].spec.ID, err, strings.TrimSpace(out))
		return f
	}
	n.setArgs(r.spec, n.spec.ID, n.ic, join)
	f.Heal = r.rec.Now()
	if !n.start() {
		f.Failed = true
		f.Detail += fmt.Sprintf("%s did not start again on its wiped data directory; ", n.spec.ID)
		return f
	}
	return r.awaitMember(f, v, "")
}

// awaitMember waits until node v is a voter of the configuration and caught up, gone (if
// not "") is no member, and the configuration has as many voters as the lab has nodes and
// nothing else; it marks f Failed if that does not come within chaosMemberWait.
func (r *chaosRun) awaitMember(f history.Fault, v int, gone string) history.Fault {
	id := r.nodes[v].spec.ID
	deadline := time.Now().Add(chaosMemberWait)
	var last string
	for {
		ok, peers := r.configured(id, gone)
		if ok {
			break
		}
		last = peers
		if time.Now().After(deadline) {
			f.Failed = true
			f.Detail += fmt.Sprintf("not a cluster of %d voters with %s and without %q within %s (last seen: %s); ", len(r.nodes), id, gone, chaosMemberWait, last)
			return f
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !r.awaitCaughtUp(v, chaosMemberWait) {
		f.Failed = true
		f.Detail += fmt.Sprintf("%s is a voter but did not catch up with an agreed leader within %s; ", id, chaosMemberWait)
	}
	return f
}

// configured asks the agreed leader for the configuration and reports whether it has id as
// a voter, not gone, and exactly len(r.nodes) voters; peers shows what it saw.
func (r *chaosRun) configured(id, gone string) (ok bool, peers string) {
	l := r.leader(time.Second)
	if l < 0 {
		return false, "no agreed leader"
	}
	var st struct {
		Raft struct {
			Peers []struct {
				ID       string `json:"id"`
				Suffrage string `json:"suffrage"`
			} `json:"peers"`
		} `json:"raft"`
	}
	resp, err := r.http.Get("http://" + r.spec.Nodes[l].http() + "/v1/status")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false, fmt.Sprintf("status of the leader: HTTP %d", resp.StatusCode)
	}
	var seen []string
	voters, self, goneThere := 0, false, false
	for _, p := range st.Raft.Peers {
		seen = append(seen, p.ID+" "+p.Suffrage)
		if p.Suffrage == "voter" {
			voters++
			self = self || p.ID == id
		}
		goneThere = goneThere || (gone != "" && p.ID == gone)
	}
	ok = self && !goneThere && voters == len(r.nodes) && len(st.Raft.Peers) == len(r.nodes)
	return ok, strings.Join(seen, ", ")
}

// stopNode stops n with SIGTERM, and with SIGKILL if it has not exited after
// chaosStopGrace; it returns "" or what went wrong.
func (r *chaosRun) stopNode(n *chaosNode) string {
	n.kill(syscall.SIGTERM)
	if n.waitExit(chaosStopGrace) {
		return ""
	}
	r.log.Error("node did not stop on SIGTERM", "node", n.spec.ID, "within", chaosStopGrace)
	n.kill(syscall.SIGKILL)
	n.waitExit(10 * time.Second)
	return fmt.Sprintf("%s still running %s after SIGTERM (killed); ", n.spec.ID, chaosStopGrace)
}

// latchCmd runs this build's latch with args (an admin verb), bounded, and returns its
// combined output.
func (r *chaosRun) latchCmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.spec.Latch, args...).CombinedOutput()
	return string(out), err
}
