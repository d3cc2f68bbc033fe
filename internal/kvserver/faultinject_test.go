package kvserver_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/kvserver"
)

// TestFaultEndpoint checks /debug/fault: absent unless the node was started
// with FaultInjection; with it, a link fault is set, shown and healed, and
// a bad request is refused naming the problem.
func TestFaultEndpoint(t *testing.T) {
	do := func(n *kvserver.Node, method, query string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+n.HTTPAddr()+"/debug/fault"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	start := func(enabled bool) *kvserver.Node {
		n, err := kvserver.Start(kvserver.Config{StoreDir: filepath.Join(t.TempDir(), "n"), ListenAddr: "127.0.0.1:0",
			HTTPAddr: "127.0.0.1:0", FaultInjection: enabled, Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	off := start(false)
	if code, _ := do(off, http.MethodPost, "?peer=2&drop=1"); code != http.StatusNotFound {
		t.Errorf("POST /debug/fault without FaultInjection = %d, want 404", code)
	}
	on := start(true)
	if code, body := do(on, http.MethodPost, "?peer=2&drop=1"); code != http.StatusOK || !strings.Contains(body, `"2":{"drop":true}`) {
		t.Errorf("POST drop = %d %s", code, body)
	}
	if code, body := do(on, http.MethodPost, "?peer=3&delay=150ms"); code != http.StatusOK || !strings.Contains(body, `"3":{"delay_ms":150,"delay":"150ms"}`) {
		t.Errorf("POST delay = %d %s", code, body)
	}
	if code, body := do(on, http.MethodPost, "?peer=3"); code != http.StatusOK || strings.Contains(body, `"3"`) {
		t.Errorf("POST clear of peer 3 = %d %s", code, body)
	}
	for _, q := range []string{"", "?peer=x", "?peer=0", "?peer=2&delay=1h", "?peer=2&delay=-1s", "?peer=2&drop=maybe"} {
		if code, body := do(on, http.MethodPost, q); code != http.StatusBadRequest || !strings.Contains(body, "invalid argument") {
			t.Errorf("POST %q = %d %s, want 400 invalid argument", q, code, body)
		}
	}
	for q, want := range map[string]string{
		"?skew=-300ms":        `"skew":"-300ms"`,
		"?lost-replies=2":     `"lost_replies":2`,
		"?disk=sync-error":    `"sync_error":true`,
		"?disk=stall&for=30s": `"disk_stall":"`,
		"?disk=ok&skew=0":     `"links":{"2":{"drop":true}}`,
	} {
		if code, body := do(on, http.MethodPost, q); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("POST %s = %d %s, want %s", q, code, body, want)
		}
	}
	for _, q := range []string{"?skew=2s", "?skew=x", "?lost-replies=-1", "?lost-replies=1000", "?disk=melt", "?disk=stall", "?disk=stall&for=2h"} {
		if code, body := do(on, http.MethodPost, q); code != http.StatusBadRequest || !strings.Contains(body, "invalid argument") {
			t.Errorf("POST %q = %d %s, want 400 invalid argument", q, code, body)
		}
	}
	if code, body := do(on, http.MethodPost, "?heal=1"); code != http.StatusOK || body != `{"node":0,"links":{}}` {
		t.Errorf("POST heal = %d %s", code, body)
	}
}
