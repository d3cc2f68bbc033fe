package allocator

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDecide steps Decide through the cases of testdata/decide. Input:
//
//	decide rf=N [leaseholder=N] [ready=N,N] [caught-up=N,N] [stuck=N,N] [threshold=N]
//	nodes: n1:10 n2:10:dead n3:4:decommissioning n4:0:down ...
//	replicas: n1 n2 n3:learner n4:incoming n5:outgoing n6:damaged n7:learner:damaged
//
// A node is live unless marked down (not heard from lately) or dead
// (past the dead-node timeout); membership is active unless marked
// decommissioning or removed.
func TestDecide(t *testing.T) {
	datadriven.RunTest(t, "testdata/decide", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "decide" {
			t.Fatalf("unknown command %q", d.Cmd)
		}
		var cfg Config
		var r Range
		d.ScanArgs(t, "rf", &cfg.ReplicationFactor)
		if d.HasArg("threshold") {
			d.ScanArgs(t, "threshold", &cfg.RebalanceThreshold)
		}
		if d.HasArg("leaseholder") {
			d.ScanArgs(t, "leaseholder", &r.Leaseholder)
		}
		ids := func(key string) []uint64 {
			var out []uint64
			if !d.HasArg(key) {
				return nil
			}
			var s string
			d.ScanArgs(t, key, &s)
			for _, f := range strings.Split(s, ",") {
				out = append(out, mustID(t, f))
			}
			return out
		}
		r.LearnersReady, r.CaughtUp, r.LearnersStuck = ids("ready"), ids("caught-up"), ids("stuck")
		nodes := map[uint64]Node{}
		for _, line := range strings.Split(d.Input, "\n") {
			head, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
			for _, f := range strings.Fields(rest) {
				parts := strings.Split(f, ":")
				switch head {
				case "nodes":
					n := Node{ID: mustID(t, parts[0]), Live: true}
					n.Replicas, _ = strconv.Atoi(parts[1])
					for _, p := range parts[2:] {
						switch p {
						case "dead":
							n.Dead, n.Live = true, false
						case "down":
							n.Live = false
						case "decommissioning":
							n.Membership = Decommissioning
						case "removed":
							n.Membership = Removed
						default:
							t.Fatalf("unknown node mark %q", p)
						}
					}
					nodes[n.ID] = n
				case "replicas":
					rep := Replica{NodeID: mustID(t, parts[0])}
					for _, p := range parts[1:] {
						switch p {
						case "learner":
							rep.Kind = Learner
						case "incoming":
							rep.Kind = VoterIncoming
						case "outgoing":
							rep.Kind = VoterOutgoing
						case "damaged":
							rep.Damaged = true
						default:
							t.Fatalf("unknown replica mark %q", p)
						}
					}
					r.Replicas = append(r.Replicas, rep)
				default:
					t.Fatalf("unknown line %q", line)
				}
			}
		}
		return Decide(r, nodes, cfg).String() + "\n"
	})
}

func mustID(t *testing.T, s string) uint64 {
	id, err := strconv.ParseUint(strings.TrimPrefix(s, "n"), 10, 64)
	if err != nil {
		t.Fatal(fmt.Errorf("node %q: %w", s, err))
	}
	return id
}

// TestAppliedLeasePlacement: the setting holds, except that a hierarchy
// cluster keeps spread.
func TestAppliedLeasePlacement(t *testing.T) {
	for _, tc := range []struct {
		setting   LeasePlacement
		hierarchy bool
		want      LeasePlacement
	}{
		{LeasePlacementOracle, false, LeasePlacementOracle},
		{LeasePlacementSpread, false, LeasePlacementSpread},
		{LeasePlacementOracle, true, LeasePlacementSpread},
		{LeasePlacementSpread, true, LeasePlacementSpread},
	} {
		if got := AppliedLeasePlacement(tc.setting, tc.hierarchy); got != tc.want {
			t.Errorf("AppliedLeasePlacement(%q, hierarchy %v) = %q, want %q", tc.setting, tc.hierarchy, got, tc.want)
		}
	}
}
