package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestExitCode checks that each class of error has its own exit status.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("boom"), ExitError},
		{usageErrorf("--limit -1"), ExitInvalidArgument},
		{fmt.Errorf("%w: value too large", client.ErrInvalidArgument), ExitInvalidArgument},
		{fmt.Errorf("key a: %w", errNotFound), ExitNotFound},
		{fmt.Errorf("%w: no node", client.ErrUnavailable), ExitUnavailable},
		{fmt.Errorf("%w: %w: full", client.ErrUnavailable, client.ErrOutOfDisk), ExitUnavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), ExitUnavailable},
		{fmt.Errorf("%w: commit", client.ErrAmbiguous), ExitAmbiguous},
		{&client.RetryableError{Reason: client.ReasonReadConflict}, ExitRetryable},
		{errDegraded, ExitDegraded},
		{errInterrupted, ExitInterrupted},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	// --help documents every status.
	for _, code := range []int{ExitError, ExitInvalidArgument, ExitNotFound, ExitUnavailable, ExitAmbiguous, ExitRetryable, ExitDegraded, ExitInterrupted} {
		if !strings.Contains(rootCmd.Long, fmt.Sprintf("\n  %d ", code)) && !strings.Contains(rootCmd.Long, fmt.Sprintf("\n  %d  ", code)) {
			t.Errorf("canopy --help does not document exit status %d", code)
		}
	}
}

// TestErrorLine checks that gRPC's framing never reaches the user.
func TestErrorLine(t *testing.T) {
	grpcErr := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)
	err := fmt.Errorf("%w: cannot reach any node of 127.0.0.1:1: 127.0.0.1:1: %v", client.ErrUnavailable, grpcErr)
	got := errorLine(err)
	if strings.Contains(got, "rpc error") || strings.Contains(got, "desc =") || strings.Contains(got, "transport:") {
		t.Errorf("errorLine kept gRPC's framing: %s", got)
	}
	if !strings.Contains(got, "dial tcp 127.0.0.1:1: connect: connection refused") {
		t.Errorf("errorLine lost the cause: %s", got)
	}
	got = errorLine(fmt.Errorf("x: %v", status.Error(codes.DeadlineExceeded, "context deadline exceeded")))
	if got != "x: deadline exceeded: context deadline exceeded" {
		t.Errorf("errorLine = %q", got)
	}
	var b bytes.Buffer
	code := reportError(&b, kvGetCmd(t), err)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if code != ExitUnavailable || len(lines) != 2 || !strings.HasPrefix(lines[0], "usage: canopy kv get KEY") || !strings.HasPrefix(lines[1], "error: ") {
		t.Errorf("reportError wrote %q, status %d; want a usage line, then one error line, and %d", b.String(), code, ExitUnavailable)
	}
}

func kvGetCmd(t *testing.T) *cobraCommand {
	c, _, err := rootCmd.Find([]string{"kv", "get"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSplitOperands checks txn's quoting: spaces, both quotes, escapes and
// empty strings.
func TestSplitOperands(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"put a 1", []string{"put", "a", "1"}, false},
		{"  put   a\t1 ", []string{"put", "a", "1"}, false},
		{"put 'my key' 'a value'", []string{"put", "my key", "a value"}, false},
		{`put "a\nb" "say \"hi\""`, []string{"put", "a\nb", `say "hi"`}, false},
		{"put e ''", []string{"put", "e", ""}, false},
		{`put e ""`, []string{"put", "e", ""}, false},
		{"put pre'fix 'suf", []string{"put", "prefix suf"}, false},
		{`put "\xff\x00" x`, []string{"put", "\xff\x00", "x"}, false},
		{"put 'open", nil, true},
		{`put "open`, nil, true},
	} {
		got, err := splitOperands(tc.in)
		if (err != nil) != tc.err || fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("splitOperands(%q) = %q, %v; want %q (error: %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
	op, err := parseTxnOp("put 'a b' ''")
	if err != nil || op != (txnOp{verb: "put", key: "a b", value: ""}) {
		t.Errorf("parseTxnOp: %+v, %v", op, err)
	}
	if !strings.Contains(rootCmdFind(t, "txn").Long, "scan START [END [LIMIT]]") {
		t.Error("canopy txn --help does not document the grammar")
	}
}

func rootCmdFind(t *testing.T, args ...string) *cobraCommand {
	c, _, err := rootCmd.Find(args)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFormatBytes checks the table, hex and json renderings of keys.
func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		in               string
		table, hex, json string
	}{
		{"plain key", "plain key", "706c61696e206b6579", "cGxhaW4ga2V5"},
		{"a\nb", `"a\nb"`, "610a62", "YQpi"},
		{"tab\there", `"tab\there"`, "7461620968657265", "dGFiCWhlcmU="},
		{"\x00\xff", `"\x00\xff"`, "00ff", "AP8="},
		{`"quoted"`, `"\"quoted\""`, "2271756f74656422", "InF1b3RlZCI="},
		{"", "", "", ""},
	} {
		if got := formatBytes(outputTable, []byte(tc.in)); got != tc.table {
			t.Errorf("table %q: %s, want %s", tc.in, got, tc.table)
		}
		if got := formatBytes(outputHex, []byte(tc.in)); got != tc.hex {
			t.Errorf("hex %q: %s, want %s", tc.in, got, tc.hex)
		}
		if got := formatBytes(outputJSON, []byte(tc.in)); got != tc.json {
			t.Errorf("json %q: %s, want %s", tc.in, got, tc.json)
		}
	}
	if got := shellQuote([]byte("it's\n")); got != `$'it\x27s\x0a'` {
		t.Errorf("shellQuote = %s", got)
	}
	if got := prettyKey(keys.UserKey(nil)); got != "/User" {
		t.Errorf("prettyKey(first user key) = %s, want /User", got)
	}
	if got := prettyKey(keys.UserKey([]byte("a\n"))); got != `/User/"a\n"` {
		t.Errorf("prettyKey = %s", got)
	}
	if got := humanBytes(3 << 20); got != "3.0 MiB" {
		t.Errorf("humanBytes = %s", got)
	}
}

// TestPutValue checks the value sources of kv put and the size limit.
func TestPutValue(t *testing.T) {
	big := bytes.Repeat([]byte("v"), 200<<10) // over the 128 KiB of one argument
	v, err := putValue([]string{"k", "-"}, "", bytes.NewReader(big))
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("stdin: %d bytes, %v", len(v), err)
	}
	f := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(f, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err = putValue([]string{"k"}, f, nil); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("--value-file: %d bytes, %v", len(v), err)
	}
	if _, err = putValue([]string{"k", "x"}, f, nil); exitCode(err) != ExitInvalidArgument {
		t.Errorf("VALUE and --value-file: %v", err)
	}
	if _, err = putValue([]string{"k"}, "", nil); exitCode(err) != ExitInvalidArgument {
		t.Errorf("no value: %v", err)
	}
	over := bytes.NewReader(make([]byte, keys.ValueBytesMax+1))
	if _, err = putValue([]string{"k", "-"}, "", over); exitCode(err) != ExitInvalidArgument || !strings.Contains(err.Error(), "ValueBytesMax") {
		t.Errorf("over the limit: %v", err)
	}
	if v, err = putValue([]string{"k", ""}, "", nil); err != nil || len(v) != 0 {
		t.Errorf("empty value: %q, %v", v, err)
	}
}

// TestApplyEnv checks that connection flags come from the environment
// unless given, and that a bad value names its variable.
func TestApplyEnv(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var host, other string
	fs.StringVar(&host, "host", DefaultHost, "")
	fs.StringVar(&other, "limit", "1", "")
	t.Setenv("CANOPY_HOST", "10.0.0.1:1,10.0.0.2:2")
	t.Setenv("CANOPY_LIMIT", "9")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err != nil || host != "10.0.0.1:1,10.0.0.2:2" || other != "1" {
		t.Errorf("applyEnv: host %q limit %q, %v", host, other, err)
	}
	fs2 := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs2.StringVar(&host, "host", DefaultHost, "")
	if err := fs2.Parse([]string{"--host", "1.2.3.4:5"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs2); err != nil || host != "1.2.3.4:5" {
		t.Errorf("the flag must win over the environment: %q, %v", host, err)
	}
	fs3 := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var d = DefaultTimeout
	fs3.DurationVar(&d, "timeout", DefaultTimeout, "")
	t.Setenv("CANOPY_TIMEOUT", "soon")
	_ = fs3.Parse(nil)
	if err := applyEnv(fs3); exitCode(err) != ExitInvalidArgument || !strings.Contains(err.Error(), "CANOPY_TIMEOUT") {
		t.Errorf("bad CANOPY_TIMEOUT: %v", err)
	}
}

// TestLogHandler checks the logging flags' values.
func TestLogHandler(t *testing.T) {
	var b bytes.Buffer
	h, err := newLogHandler(&b, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l := slogNew(h)
	l.Info("hidden")
	l.Warn("shown", "node", 1)
	if got := b.String(); strings.Contains(got, "hidden") || !strings.HasPrefix(got, `{"time":`) || !strings.Contains(got, `"node":1`) {
		t.Errorf("json log: %q", got)
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "xml"}} {
		if _, err := newLogHandler(&b, bad[0], bad[1]); exitCode(err) != ExitInvalidArgument {
			t.Errorf("--log-level %s --log-format %s: %v", bad[0], bad[1], err)
		}
	}
}

type cobraCommand = cobra.Command

var slogNew = slog.New
