package replica

import (
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestSupersededApps checks which appends of one Ready are left unsent: only
// a commit-only MsgApp followed by a MsgApp to the same follower, in the
// same term, at the same or a later log position and commit index.
func TestSupersededApps(t *testing.T) {
	app := func(to, term, index, commit uint64, entries int) raftpb.Message {
		return raftpb.Message{Type: raftpb.MsgApp, To: to, Term: term, Index: index, Commit: commit,
			Entries: make([]raftpb.Entry, entries)}
	}
	for _, tc := range []struct {
		name string
		msgs []raftpb.Message
		want map[int]bool
	}{
		{"none", nil, nil},
		{"commit-only alone", []raftpb.Message{app(2, 5, 10, 10, 0)}, nil},
		{"commit-only then entries", []raftpb.Message{app(2, 5, 10, 10, 0), app(2, 5, 10, 10, 1)}, map[int]bool{0: true}},
		{"commit-only then a later commit-only", []raftpb.Message{app(2, 5, 10, 9, 0), app(2, 5, 10, 10, 0)}, map[int]bool{0: true}},
		{"per follower", []raftpb.Message{app(2, 5, 10, 10, 0), app(3, 5, 10, 10, 0), app(2, 5, 10, 10, 1)}, map[int]bool{0: true}},
		{"entries are never dropped", []raftpb.Message{app(2, 5, 10, 10, 1), app(2, 5, 11, 10, 1)}, nil},
		{"a lower position does not supersede", []raftpb.Message{app(2, 5, 10, 10, 0), app(2, 5, 8, 10, 3)}, nil},
		{"a lower commit does not supersede", []raftpb.Message{app(2, 5, 10, 10, 0), app(2, 5, 10, 9, 1)}, nil},
		{"another term does not supersede", []raftpb.Message{app(2, 5, 10, 10, 0), app(2, 6, 10, 10, 1)}, nil},
		{"other types are kept", []raftpb.Message{{Type: raftpb.MsgHeartbeat, To: 2, Term: 5}, app(2, 5, 10, 10, 1)}, nil},
	} {
		if got := supersededApps(tc.msgs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: superseded %v, want %v", tc.name, got, tc.want)
		}
	}
}
