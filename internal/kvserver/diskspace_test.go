package kvserver

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"go.etcd.io/raft/v3/raftpb"
)

// TestDiskMonitor steps the free space of a fake disk down through the
// threshold and back, with a hand-driven clock, and checks what the node
// refuses, what it drops, and what it logs.
func TestDiskMonitor(t *testing.T) {
	var logs bytes.Buffer
	free := uint64(1 << 30)
	cfg := &Config{StoreDir: "/store", StoreMinFreeBytes: 100 << 20, DiskFullLogInterval: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	d := &diskMonitor{dir: cfg.StoreDir, logInterval: cfg.DiskFullLogInterval, log: cfg.Logger, minFree: 100 << 20,
		space: func(string) (uint64, uint64, error) { return free, 2 << 30, nil }}
	put := &rpcpb.BatchRequest{RangeId: 5, Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: []byte("k")}}}}}
	putIntent := &rpcpb.BatchRequest{RangeId: 5, Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{Key: []byte("k")}}}}}
	resolve := &rpcpb.BatchRequest{RangeId: 5, Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{Key: []byte("k")}}}}}
	app := &raftpb.Message{Type: raftpb.MsgApp, Entries: []raftpb.Entry{{Index: 11}}}
	beat := &raftpb.Message{Type: raftpb.MsgHeartbeat}
	lines := func() int { return strings.Count(logs.String(), "\n") }

	t0 := time.Unix(1000, 0)
	d.check(t0)
	if e := d.refuseWrite(put, 5, 1); e != nil || d.dropRaft(app) || lines() != 0 {
		t.Fatalf("with space: refused %v, logged %q", e, logs.String())
	}

	free = 99 << 20
	d.check(t0.Add(time.Second))
	for _, req := range []*rpcpb.BatchRequest{put, putIntent} {
		e := d.refuseWrite(req, 5, 1)
		if !rpcpb.IsOutOfDisk(e) || !strings.Contains(e.GetMessage(), "range r5 on node n1: store /store has 99.0 MiB free, below its minimum (100.0 MiB)") {
			t.Fatalf("low disk: %s refused with %v", req.Requests[0].Method(), e)
		}
	}
	if e := d.refuseWrite(resolve, 5, 1); e != nil {
		t.Fatalf("low disk: intent resolution refused: %v", e)
	}
	if !d.dropRaft(app) || d.dropRaft(beat) || d.dropRaft(&raftpb.Message{Type: raftpb.MsgApp}) {
		t.Fatal("low disk: want appends with entries dropped, heartbeats and empty appends kept")
	}
	if lines() != 1 || !strings.Contains(logs.String(), "out of disk: refusing writes") {
		t.Fatalf("low disk: log %q; want one line", logs.String())
	}
	// Checks within the log interval write nothing; the next line comes
	// after it, with what was refused and dropped meanwhile.
	for i := 2; i <= 10; i++ {
		d.check(t0.Add(time.Duration(i) * time.Second))
	}
	if lines() != 1 {
		t.Fatalf("log within one interval: %q", logs.String())
	}
	d.check(t0.Add(11 * time.Second))
	if lines() != 2 || !strings.Contains(logs.String(), "writes_refused=2 raft_appends_dropped=1") {
		t.Fatalf("log after one interval: %q", logs.String())
	}

	free = 100 << 20
	d.check(t0.Add(12 * time.Second))
	if e := d.refuseWrite(put, 5, 1); e != nil || d.dropRaft(app) {
		t.Fatalf("space back: refused %v", e)
	}
	if lines() != 3 || !strings.Contains(logs.String(), "disk space is back: accepting writes") {
		t.Fatalf("space back: log %q", logs.String())
	}
	// Low again at once: logged at once.
	free = 1 << 20
	d.check(t0.Add(13 * time.Second))
	if lines() != 4 {
		t.Fatalf("low again: log %q", logs.String())
	}
}

// TestDiskMonitorAtStart: a store with less than half of the threshold free
// is refused; the default threshold is 1% within [2 x memtable, 1 GiB].
func TestDiskMonitorAtStart(t *testing.T) {
	dir := t.TempDir()
	free, total, err := diskSpace(dir + "/not/yet/created")
	if err != nil || total == 0 || free > total {
		t.Fatalf("diskSpace: %d of %d, %v", free, total, err)
	}
	cfg := &Config{StoreDir: dir, StoreMinFreeBytes: int64(2*free + 4<<20), Logger: slog.Default()}
	if _, err := newDiskMonitor(cfg); !errors.Is(err, ErrDiskLow) || !strings.Contains(err.Error(), "--store-min-free") {
		t.Fatalf("threshold above twice the free space: %v; want ErrDiskLow naming --store-min-free", err)
	}
	cfg.StoreMinFreeBytes = -1
	if d, err := newDiskMonitor(cfg); err != nil || d.minFree != 0 {
		t.Fatalf("no check: %v, threshold %d", err, d.minFree)
	}
	for _, tc := range []struct{ total, mem, want uint64 }{
		{64 << 20, 16 << 20, 32 << 20},
		{10 << 30, 16 << 20, 10 << 30 / 100},
		{1 << 40, 16 << 20, 1 << 30},
	} {
		if got := defaultStoreMinFree(tc.total, tc.mem); got != tc.want {
			t.Errorf("defaultStoreMinFree(%d, %d) = %d, want %d", tc.total, tc.mem, got, tc.want)
		}
	}
}
