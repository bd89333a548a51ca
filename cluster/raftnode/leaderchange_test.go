package raftnode

import (
	"sync"
	"testing"
)

// leaderLog records one node's OnLeaderChange calls.
type leaderLog struct {
	mu    sync.Mutex
	calls [][2]string // id, addr
}

func (l *leaderLog) add(id, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, [2]string{id, addr})
}

func (l *leaderLog) last() (string, string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) == 0 {
		return "", "", 0
	}
	c := l.calls[len(l.calls)-1]
	return c[0], c[1], len(l.calls)
}

// noRepeats reports whether no two calls in a row name the same leader.
func (l *leaderLog) noRepeats() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 1; i < len(l.calls); i++ {
		if l.calls[i] == l.calls[i-1] {
			return false
		}
	}
	return true
}

// Every node is told who leads, with the leader's advertised address, without asking: the
// followers from raft's observation of the leader's heartbeat. When the leader goes, the
// survivors are told the new one. No call repeats the previous one.
func TestOnLeaderChangeReportsTheLeader(t *testing.T) {
	var mu sync.Mutex
	logs := map[string]*leaderLog{}
	c := newCluster(t, 3, func(cfg *Config) {
		mu.Lock()
		defer mu.Unlock()
		l := &leaderLog{}
		logs[cfg.ID] = l
		cfg.OnLeaderChange = l.add
	})
	logOf := func(tn *tnode) *leaderLog { mu.Lock(); defer mu.Unlock(); return logs[tn.id] }
	toldAll := func(l *tnode) func() bool {
		return func() bool {
			for _, tn := range c.running() {
				if id, addr, _ := logOf(tn).last(); id != l.id || addr != l.addr {
					return false
				}
			}
			return true
		}
	}
	old := c.leader()
	eventually(t, "every node told the leader "+old.id, toldAll(old))

	c.shutdown(old)
	l := c.leader()
	eventually(t, "the survivors told the new leader "+l.id, toldAll(l))
	for _, tn := range c.nodes {
		if !logOf(tn).noRepeats() {
			t.Errorf("%s: the same leader reported twice in a row: %v", tn.id, logOf(tn).calls)
		}
	}
}
