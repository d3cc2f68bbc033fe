package clusterstatus

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

func desc(id uint64, start, end []byte, nodes ...uint64) *rpcpb.RangeDescriptor {
	d := &rpcpb.RangeDescriptor{RangeId: id, StartKey: start, EndKey: end}
	for _, n := range nodes {
		d.Replicas = append(d.Replicas, &rpcpb.ReplicaDescriptor{NodeId: n})
	}
	return d
}

// TestRangeHealth checks the verdicts status and the page show: a range
// whose followers all take appends is ok; one follower down makes it
// under-replicated, two of three unavailable; no leader, unavailable.
func TestRangeHealth(t *testing.T) {
	d := desc(5, nil, nil, 1, 2, 3)
	f := func(node uint64, state string, active bool) *rpcpb.FollowerProgress {
		return &rpcpb.FollowerProgress{NodeId: node, State: state, RecentActive: active, Lag: node}
	}
	leader := func(fs ...*rpcpb.FollowerProgress) *rpcpb.RangeStatus {
		return &rpcpb.RangeStatus{Range: d, LeaderNodeId: 1, Followers: fs}
	}
	all := map[uint64]bool{1: true, 2: true, 3: true}
	for _, tc := range []struct {
		leader *rpcpb.RangeStatus
		live   map[uint64]bool
		health int
		lag    string
	}{
		{leader(f(2, "replicate", true), f(3, "replicate", true)), all, healthOK, "n2:2 n3:3"},
		{leader(f(2, "replicate", true), f(3, "probe", false)), all, healthUnder, "n2:2 n3:3(probe)"},
		{leader(f(2, "replicate", true), f(3, "replicate", true)), map[uint64]bool{1: true, 2: true}, healthUnder, "n2:2 n3:3(down)"},
		{leader(f(2, "probe", false), f(3, "probe", false)), all, healthUnavailable, "n2:2(probe) n3:3(probe)"},
		{nil, all, healthUnavailable, "-"},
	} {
		fs, health, why := rangeHealth(d, tc.leader, tc.live, 3)
		r := Range{Followers: fs}
		if health != tc.health || r.Lag() != tc.lag || (health != healthOK) != (why != "") {
			t.Errorf("leader %v, live %v: health %d (%q), lag %q; want %d, %q", tc.leader, tc.live, health, why, r.Lag(), tc.health, tc.lag)
		}
	}
}

// TestJSONRedact checks that Redact hides every user key but the user
// keyspace's start, keeps system keys, and drops the raw keys.
func TestJSONRedact(t *testing.T) {
	r := &Report{Settings: &rpcpb.ClusterSettings{ClusterId: "c", ReplicationFactor: 1}, At: time.Unix(10, 0),
		Nodes: []Node{{Desc: &rpcpb.NodeDescriptor{NodeId: 1, Address: "a:1"}, Err: errors.New("down"), Membership: "active"}},
		Ranges: []Range{
			{Info: client.RangeInfo{Desc: desc(1, nil, keys.StatusPrefix, 1)}},
			{Info: client.RangeInfo{Desc: desc(2, keys.StatusPrefix, keys.UserKey(nil), 1)}},
			{Info: client.RangeInfo{Desc: desc(3, keys.UserKey(nil), keys.UserKey([]byte("secret")), 1)}},
			{Info: client.RangeInfo{Desc: desc(4, keys.UserKey([]byte("secret")), keys.MaxKey, 1)}},
		}}
	j := r.JSON(func(err error) string { return "err: " + err.Error() })
	if j.Nodes[0].Error != "err: down" || j.Nodes[0].Live || len(j.Problems) != 1 {
		t.Fatalf("nodes %+v, problems %q", j.Nodes, j.Problems)
	}
	if j.Ranges[2].End != `/User/"secret"` || j.Ranges[2].EndKey == "" {
		t.Fatalf("before Redact: %+v", j.Ranges[2])
	}
	j.Redact()
	var got []string
	for _, rj := range j.Ranges {
		got = append(got, rj.Start+" "+rj.End)
		if rj.StartKey != "" || rj.EndKey != "" {
			t.Errorf("r%d keeps raw keys after Redact", rj.RangeID)
		}
	}
	want := []string{"/Min /System/status/", "/System/status/ /User", "/User " + HiddenKey, HiddenKey + " /Max"}
	if fmt.Sprint(got) != fmt.Sprint(want) || !j.KeysHidden {
		t.Fatalf("after Redact: %q, want %q", got, want)
	}
}

// TestErrorText checks that gRPC's framing is removed and the cause kept.
func TestErrorText(t *testing.T) {
	err := errors.New(`canopy: unavailable: node status of 127.0.0.1:1: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)
	want := "canopy: unavailable: node status of 127.0.0.1:1: unavailable: dial tcp 127.0.0.1:1: connect: connection refused"
	if got := ErrorText(err); got != want {
		t.Fatalf("ErrorText = %q, want %q", got, want)
	}
}

// TestLeasePlacementApplied: the setting is what the nodes carry out, except
// that a hierarchy cluster keeps spread; the JSON carries both.
func TestLeasePlacementApplied(t *testing.T) {
	for _, tc := range []struct {
		protocol, setting, want string
	}{
		{"", "oracle", "oracle"},
		{"default", "spread", "spread"},
		{"2pc-locking", "oracle", "oracle"},
		{"hierarchy-locking", "oracle", "spread"},
		{"hierarchy-timestamps", "spread", "spread"},
		{"hierarchy-locking", "", ""},
	} {
		r := &Report{Settings: &rpcpb.ClusterSettings{CommitProtocol: tc.protocol}, LeasePlacement: tc.setting}
		if got := r.LeasePlacementApplied(); got != tc.want {
			t.Errorf("protocol %q, setting %q: applied %q, want %q", tc.protocol, tc.setting, got, tc.want)
		}
		if j := r.JSON(func(err error) string { return err.Error() }); j.LeasePlacement != tc.setting || j.LeasePlacementApplied != tc.want {
			t.Errorf("protocol %q, setting %q: JSON %q / %q", tc.protocol, tc.setting, j.LeasePlacement, j.LeasePlacementApplied)
		}
	}
}

// TestHierarchyLine: canopy status shows the validator tree, where each
// inner validator runs (the lowest-ID live node below it) and the
// batching; a cluster without a hierarchy protocol shows none.
func TestHierarchyLine(t *testing.T) {
	r := &Report{Settings: &rpcpb.ClusterSettings{CommitProtocol: "hierarchy-locking", Hierarchy: &rpcpb.HierarchySettings{
		Variant: "locking", Tree: "((1 2) (3 4))", ValidatorBatchSize: 10, ValidatorBatchTimeoutUs: 1000, NodeBatchSize: 50, NodeBatchTimeoutUs: 2000}}}
	for id := uint64(1); id <= 4; id++ {
		n := Node{Desc: &rpcpb.NodeDescriptor{NodeId: id}}
		if id != 1 {
			n.Status = &rpcpb.NodeStatusResponse{}
		} else {
			n.Err = errors.New("down")
		}
		r.Nodes = append(r.Nodes, n)
	}
	want := "validator tree ((1 2) (3 4)), inner validators v0@n2 v1@n2 v2@n3; batches: votes 10 per message or 1000µs, decisions 50 per message or 2000µs"
	if got := r.HierarchyLine(); got != want {
		t.Fatalf("line:\n got %q\nwant %q", got, want)
	}
	j := r.JSON(func(err error) string { return err.Error() })
	if j.Hierarchy == nil || j.Hierarchy.Tree != "((1 2) (3 4))" || fmt.Sprint(j.Hierarchy.InnerHosts) != "[v0@n2 v1@n2 v2@n3]" {
		t.Fatalf("JSON hierarchy %+v", j.Hierarchy)
	}
	none := &Report{Settings: &rpcpb.ClusterSettings{CommitProtocol: "default"}}
	if none.HierarchyLine() != "" || none.Hierarchy() != nil {
		t.Fatalf("a cluster without a hierarchy protocol shows %q", none.HierarchyLine())
	}
}
