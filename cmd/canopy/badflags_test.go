package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBadFlagsRefusedAtOnce (issue 13, "Bad input") runs `canopy start`
// and `canopy init` as processes with each bad flag of the issue (and the
// other bounded flags of start) and checks that each is refused before
// anything starts: exit status 2, one error line naming the flag and its
// allowed range, no panic (for an unresolvable --join name, after at
// most DNSLookupTimeout rather than at once). Before the fix --raft-tick -1s panicked,
// --raft-tick 1ns burnt a CPU, --initial-ranges 4294967297 wrapped to 1
// and --replication-factor -1 became 1.
func TestBadFlagsRefusedAtOnce(t *testing.T) {
	store := filepath.Join(t.TempDir(), "s")
	start := func(flags ...string) []string {
		return append([]string{"start", "--store", store, "--listen", "127.0.0.1:0", "--http-addr", "off"}, flags...)
	}
	for _, tc := range []struct {
		args []string
		want string // in the error line: the flag and its range
	}{
		{start("--raft-tick", "-1s"), "--raft-tick -1s is outside [10ms, 10s]"},
		{start("--raft-tick", "1ns"), "--raft-tick 1ns is outside [10ms, 10s]"},
		{start("--dead-node-timeout", "1s"), "--dead-node-timeout 1s is outside [5s, 168h0m0s]"},
		{start("--scrub-interval", "1ms"), "--scrub-interval 1ms is outside [1s, 8760h0m0s] (or 0: off)"},
		{start("--raft-workers", "65"), "--raft-workers 65 is outside [0, 64]"},
		{start("--value-threshold", "-5"), "--value-threshold -5 is outside"},
		{start("--range-split-qps", "-1"), "--range-split-qps -1: must be 0 (off) or more"},
		{start("--storage-mode", "bogus"), "--storage-mode"},
		{start("--join", "127.0.0.1"), "--join"},
		// A name is looked up for up to DNSLookupTimeout (10 s; in a
		// container network a peer's name resolves once its container
		// is up), then refused, before the node starts.
		{start("--join", "nosuch.invalid:26257"), `--join "nosuch.invalid:26257": host "nosuch.invalid" does not resolve`},
		{[]string{"init", "--host", "127.0.0.1:1", "--initial-ranges", "4294967297"}, "--initial-ranges 4294967297 is outside [1, 20000]"},
		{[]string{"init", "--host", "127.0.0.1:1", "--replication-factor", "-1"}, "--replication-factor -1 is outside [1, 9]"},
	} {
		began := time.Now()
		r := canopy(t, nil, nil, tc.args...)
		what := strings.Join(tc.args, " ")
		r.want(t, ExitInvalidArgument, what)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: stderr %q, want it to say %q", what, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("%s: panicked: %s", what, r.stderr)
		}
		t.Logf("%s: refused after %v", what, time.Since(began).Round(time.Millisecond))
	}
}
