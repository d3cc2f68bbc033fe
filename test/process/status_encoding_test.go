package process

import (
	"strings"
	"testing"
)

// TestCLIStatusEncodingChange moves a cluster of real processes from the
// plain tickets status encoding (chosen with `canopy init
// --status-encoding tickets`: the default is tickets-mix) to v1 with
// `canopy admin setting --status-encoding` (issue 10 item 5): the schedule
// printed gains a v1 era, a second identical change is refused with one
// error line and a non-zero exit, and transactions keep working across
// the change.
func TestCLIStatusEncodingChange(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	if out := c.mustCLI("init", "--host", c.addrs[0], "--status-encoding", "tickets"); !strings.Contains(out, "initialized") ||
		!strings.Contains(out, "status encoding tickets ") {
		t.Fatalf("canopy init printed %q", out)
	}
	c.waitLive(3)
	c.mustCLI("kv", "put", c.hostFlag(), "before", "tickets")
	if out := c.mustCLI("admin", "setting", c.hostFlag()); !strings.Contains(out, "status_encoding=tickets schedule_version") {
		t.Fatalf("canopy admin setting printed %q", out)
	}
	out := c.mustCLI("admin", "setting", c.hostFlag(), "--status-encoding=v1")
	if !strings.Contains(out, "status_encoding=v1") || strings.Count(out, "from start_ts") != 2 {
		t.Fatalf("canopy admin setting --status-encoding=v1 printed %q", out)
	}
	out, err := c.cli("admin", "setting", c.hostFlag(), "--status-encoding=v1")
	if err == nil || !strings.Contains(err.Error(), "already v1") {
		t.Fatalf("a second change to v1: err %v, output %q", err, out)
	}
	c.mustCLI("kv", "put", c.hostFlag(), "after", "v1")
	for k, v := range map[string]string{"before": "tickets", "after": "v1"} {
		if got := strings.TrimSpace(c.mustCLI("kv", "get", c.hostFlag(), k)); got != v {
			t.Fatalf("get %s = %q, want %q", k, got, v)
		}
	}
}
