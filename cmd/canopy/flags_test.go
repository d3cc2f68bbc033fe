package main

import (
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/replica"
)

// TestFlagChecks checks that bad flags of start and init are refused with
// a message naming the flag, and good ones pass.
func TestFlagChecks(t *testing.T) {
	ok := []string{"127.0.0.1:26257", "127.0.0.1:26258"}
	for _, tc := range []struct {
		name string
		err  error
		flag string // "" : no error
	}{
		{"defaults", checkStartFlags("127.0.0.1:26257", "", ok, 100*time.Millisecond, 8192, replica.SchedulerConfig{}), ""},
		{"listen port 0", checkStartFlags("127.0.0.1:0", "", nil, 100*time.Millisecond, 8192, replica.SchedulerConfig{}), ""},
		{"negative tick", checkStartFlags("127.0.0.1:26257", "", ok, -time.Second, 8192, replica.SchedulerConfig{}), "--raft-tick"},
		{"tiny tick", checkStartFlags("127.0.0.1:26257", "", ok, time.Nanosecond, 8192, replica.SchedulerConfig{}), "--raft-tick"},
		{"bad join", checkStartFlags("127.0.0.1:26257", "", []string{"127.0.0.1"}, 100*time.Millisecond, 8192, replica.SchedulerConfig{}), "--join"},
		{"join port 0", checkStartFlags("127.0.0.1:26257", "", []string{"127.0.0.1:0"}, 100*time.Millisecond, 8192, replica.SchedulerConfig{}), "--join"},
		{"bad listen", checkStartFlags("127.0.0.1:70000", "", ok, 100*time.Millisecond, 8192, replica.SchedulerConfig{}), "--listen"},
		{"threshold", checkStartFlags("127.0.0.1:26257", "", ok, 100*time.Millisecond, 0, replica.SchedulerConfig{}), "--value-threshold"},
		{"workers", checkStartFlags("127.0.0.1:26257", "", ok, 100*time.Millisecond, 8192, replica.SchedulerConfig{Workers: -1}), "--raft-workers"},
		{"init defaults", checkInitFlags("127.0.0.1:26257", 1, 3, kvserver.DefaultStatusEncoding), ""},
		{"init tickets", checkInitFlags("127.0.0.1:26257", 1, 3, "tickets"), ""},
		{"init v1", checkInitFlags("127.0.0.1:26257", 1, 3, "v1"), ""},
		{"init ranges wrap", checkInitFlags("127.0.0.1:26257", 4294967297, 3, "tickets"), "--initial-ranges"},
		{"init rf", checkInitFlags("127.0.0.1:26257", 1, -1, "tickets"), "--replication-factor"},
		{"init encoding", checkInitFlags("127.0.0.1:26257", 1, 3, "v2"), "--status-encoding"},
	} {
		switch {
		case tc.flag == "" && tc.err != nil:
			t.Errorf("%s: refused: %v", tc.name, tc.err)
		case tc.flag != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.flag)):
			t.Errorf("%s: got %v, want an error naming %s", tc.name, tc.err, tc.flag)
		}
	}
}
