package replica

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAmbiguousProposersSeeNoLeader: a proposer told that its proposal's
// outcome is unknown (ErrAmbiguous), because its leader stepped down with
// no leader known or stopped, finds the replica's status no longer saying
// leader. kvserver relies on it: such a proposer stops counting its write
// as in flight for closed timestamps, and a closed timestamp published by
// a status that still said leader could pass that write, which may yet
// apply under the next leader. Before the fix the status said leader
// until the end of the Ready round (step-down) or forever (Stop).
func TestAmbiguousProposersSeeNoLeader(t *testing.T) {
	for _, how := range []string{"step-down", "stop"} {
		t.Run(how, func(t *testing.T) {
			g := newGroup(t, 100)
			g.replica(1).Campaign()
			lead := g.leader()
			id := lead.cfg.PeerID
			// Nobody acknowledges the proposal: it cannot commit.
			for f := uint64(1); f <= 3; f++ {
				if f != id {
					g.stop(f)
				}
			}
			type seen struct {
				err      error
				isLeader bool
			}
			got := make(chan seen, 1)
			go func() {
				_, _ = lead.ProposeEvaluated(context.Background(), []byte("a=b"), 0, func(_ any, err error) {
					got <- seen{err, lead.Status().IsLeader}
				})
			}()
			if how == "stop" {
				time.Sleep(5 * time.Millisecond) // let the proposal reach Raft
				g.stop(id)
			} // else: CheckQuorum steps the leader down after an election timeout
			var s seen
			select {
			case s = <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("the proposer never learnt its outcome")
			}
			if !errors.Is(s.err, ErrAmbiguous) && !errors.Is(s.err, ErrStopped) && !errors.Is(s.err, ErrProposalDropped) {
				t.Fatalf("proposal ended with %v, want ErrAmbiguous (or dropped before Raft)", s.err)
			}
			if s.isLeader {
				t.Fatalf("the proposer learnt %v while the status still said leader", s.err)
			}
		})
	}
}
