package raftnode

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	oc "github.com/latchd/latch/cluster/outcome"
	"github.com/latchd/latch/fsm"
)

// Entries that commit while the node leads are answered by raft's FSM goroutine as it applies
// them (the fast path), in submission order, and settle answers none of them.
func TestPipelineAnswersFromTheFSM(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader().n
	fast, slow := l.pipe.fast.Load(), l.pipe.slow.Load()

	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mu sync.Mutex
			var got []int
			done := make(chan struct{})
			for i := range each {
				l.Submit(acquire(fmt.Sprintf("pipe/%d/%d", w, i)), func(r fsm.Result, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil || r.Kind != fsm.Granted {
						errs <- fmt.Errorf("worker %d command %d: %+v %v", w, i, r, err)
					}
					got = append(got, i)
					if len(got) == each {
						close(done)
					}
				})
			}
			select {
			case <-done:
			case <-time.After(testApply + 10*time.Second):
				errs <- fmt.Errorf("worker %d: %d of %d answered", w, len(got), each)
				return
			}
			for i, v := range got {
				if v != i {
					errs <- fmt.Errorf("worker %d: answers out of order: %v", w, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := l.pipe.fast.Load() - fast; got == 0 {
		t.Fatalf("no entry answered by the FSM goroutine")
	}
	if got := l.pipe.slow.Load() - slow; got != 0 {
		t.Fatalf("%d entries answered by settle while the node led throughout", got)
	}
}

// An entry raft never appends (here: one whose future fails before the FSM sees it, because
// leadership is gone) is answered by settle from its future, and what was behind it is still
// answered in order.
func TestPipelineSettlesWhatTheFSMNeverApplies(t *testing.T) {
	c := newCluster(t, 3, nil)
	ld := c.leader()
	l := ld.n
	held, release := make(chan struct{}), make(chan struct{})
	testHookBeforeApply = func() { held <- struct{}{}; <-release }
	t.Cleanup(func() { testHookBeforeApply = nil })

	res := make(chan error, 2)
	l.Submit(acquire("lost/a"), func(_ fsm.Result, err error) { res <- err })
	<-held // the proposer checked leadership and is about to hand the entry to raft
	// Partition the leader away from both followers: they elect another, this one steps down.
	c.net.Down(raft.ServerAddress(ld.addr))
	deadline := time.Now().Add(testApply + 20*time.Second)
	for l.leading.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l.leading.Load() {
		t.Fatalf("the isolated leader did not step down")
	}
	testHookBeforeApply = nil
	close(release)
	select {
	case err := <-res:
		if err == nil {
			t.Fatalf("an entry proposed by a deposed leader was answered applied")
		}
		if _, ok := oc.Of(err); !ok {
			t.Fatalf("answer without an outcome: %v", err)
		}
	case <-time.After(testApply + 20*time.Second):
		t.Fatalf("the entry of a deposed leader was never answered")
	}
	if l.pipe.slow.Load() == 0 {
		t.Fatalf("settle answered nothing")
	}
}
