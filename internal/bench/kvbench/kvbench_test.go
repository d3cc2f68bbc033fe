package kvbench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// mapKV is an in-memory KV; every failEvery-th call fails.
type mapKV struct {
	mu        sync.Mutex
	m         map[string][]byte
	calls     int
	failEvery int
}

var errFake = errors.New("fake failure")

func (f *mapKV) fail() bool {
	f.calls++
	return f.failEvery > 0 && f.calls%f.failEvery == 0
}

func (f *mapKV) Put(_ context.Context, k, v []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail() {
		return errFake
	}
	f.m[string(k)] = append([]byte(nil), v...)
	return nil
}

func (f *mapKV) Get(_ context.Context, k []byte) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail() {
		return nil, false, errFake
	}
	v, ok := f.m[string(k)]
	return v, ok, nil
}

func TestKeysDistinctAndSpread(t *testing.T) {
	seen := map[string]bool{}
	var firstBytes [4]int
	for i := 0; i < 4000; i++ {
		k := Key(i)
		if seen[string(k)] {
			t.Fatalf("key %d repeats %q", i, k)
		}
		seen[string(k)] = true
		firstBytes[k[0]>>6]++
	}
	// Four ranges split by first byte would each hold about 1000 keys.
	for q, n := range firstBytes {
		if n < 800 || n > 1200 {
			t.Errorf("quarter %d of the first byte holds %d of 4000 keys", q, n)
		}
	}
}

func TestLoadThenRunBoundedByCount(t *testing.T) {
	kv := &mapKV{m: map[string][]byte{}}
	o := Options{Keys: 300, ValueBytes: 100, Duration: time.Hour, OpsMax: 2000}
	if err := Load(context.Background(), kv, o); err != nil {
		t.Fatal(err)
	}
	if len(kv.m) != 300 {
		t.Fatalf("load wrote %d keys, want 300", len(kv.m))
	}
	for k, v := range kv.m {
		if len(v) != 100 {
			t.Fatalf("key %q has a %d-byte value, want 100", k, len(v))
		}
	}
	for _, rp := range []int{0, 50, 100} {
		// Duration is an hour: the run ends only because of OpsMax.
		r, err := Run(context.Background(), kv, o, rp, 8)
		if err != nil {
			t.Fatal(err)
		}
		if r.Ops < o.OpsMax || r.Reads+r.Writes != r.Ops || r.Errors != 0 || r.NotFound != 0 {
			t.Errorf("read %d%%: %+v", rp, r)
		}
		if (rp == 0 && r.Reads != 0) || (rp == 100 && r.Writes != 0) || (rp == 50 && (r.Reads == 0 || r.Writes == 0)) {
			t.Errorf("read %d%%: %d reads, %d writes", rp, r.Reads, r.Writes)
		}
		if r.All.Count < r.Ops {
			t.Errorf("read %d%%: %d latencies for %d ops", rp, r.All.Count, r.Ops)
		}
	}
}

func TestRunBoundedByTimeCountsErrors(t *testing.T) {
	kv := &mapKV{m: map[string][]byte{}, failEvery: 10}
	var progress bytes.Buffer
	o := Options{Keys: 50, Duration: 300 * time.Millisecond, OpsMax: 1 << 40, Warmup: 50 * time.Millisecond,
		Progress: &progress, ProgressInterval: 100 * time.Millisecond}
	r, err := Run(context.Background(), kv, o, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors == 0 || r.FirstError != errFake.Error() || r.Ops == 0 {
		t.Errorf("errors %d (%q), ops %d", r.Errors, r.FirstError, r.Ops)
	}
	if !bytes.Contains(progress.Bytes(), []byte("ops/s")) {
		t.Errorf("no progress line: %q", progress.String())
	}
}

func TestValidate(t *testing.T) {
	kv := &mapKV{m: map[string][]byte{}}
	for _, o := range []Options{{Keys: -1}, {ValueBytes: -1}, {Duration: -time.Second}, {Warmup: -1}} {
		if _, err := Run(context.Background(), kv, o, 0, 1); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := Run(context.Background(), kv, Options{}, 101, 1); err == nil {
		t.Error("read percent 101 accepted")
	}
	if _, err := Run(context.Background(), kv, Options{}, 0, 0); err == nil {
		t.Error("concurrency 0 accepted")
	}
}

func TestRunMeasuresServerProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc")
	}
	kv := &mapKV{m: map[string][]byte{}}
	// This process stands in for a server.
	o := Options{Keys: 50, Duration: 200 * time.Millisecond, ServerPIDs: []int{os.Getpid()}}
	r, err := Run(context.Background(), kv, o, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.ServerCPUPerOp(); !ok || r.ServerPIDs != 1 || r.ServerCPU < 0 {
		t.Fatalf("server CPU not measured: %+v", r)
	}
	var b bytes.Buffer
	WriteTableRow(&b, Row{Cluster: "x", Result: r})
	if bytes.HasSuffix(bytes.TrimSpace(b.Bytes()), []byte("-")) {
		t.Errorf("table row without server CPU: %q", b.String())
	}
	o.ServerPIDs = []int{os.Getpid(), 1 << 30} // no such process
	if _, err := Run(context.Background(), kv, o, 0, 1); err == nil {
		t.Fatal("a run with an unreadable server process succeeded")
	}
}
