package kvserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// snapshotHost is a rangeHost over one engine, for the state machine
// alone.
type snapshotHost struct {
	eng *storage.Engine
	reg snapshotRegistry
}

func (h *snapshotHost) Engine() *storage.Engine           { return h.eng }
func (h *snapshotHost) startRange(*rpcpb.RangeDescriptor) {}
func (h *snapshotHost) snapshots() *snapshotRegistry      { return &h.reg }
func newSnapshotHost(t *testing.T, dir string) *snapshotHost {
	t.Helper()
	opts := storage.Options{CacheBytes: 1 << 20}
	if dir == "" {
		opts.FS = vfs.NewMem()
		dir = "store"
	}
	eng, err := storage.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	return &snapshotHost{eng: eng}
}

// fillRange writes n distinct user keys, each with a value of size bytes,
// at timestamps from ts up.
func fillRange(t *testing.T, eng *storage.Engine, n, size int, ts uint64) {
	t.Helper()
	b := eng.NewBatch()
	defer b.Close()
	for i := 0; i < n; i++ {
		v := make([]byte, size)
		binary.BigEndian.PutUint32(v, uint32(i))
		if err := mvcc.PutCommitted(b, keys.UserKey([]byte(fmt.Sprintf("k%05d", i))), v, false, mvcc.Timestamp(ts+uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

func spanPairs(t *testing.T, r storage.Reader, d *rpcpb.RangeDescriptor) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := mvcc.IterateSpan(r, d.StartKey, d.EndKey, func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSnapshotStagedApply: a snapshot made by the state machine is only
// its state and a stream ID; its pairs, streamed in chunks and staged in a
// file, are applied in bounded batches behind a marker that the Ready's
// batch removes. A node that stops before that batch commits finds the
// marker at start and resets the replica to uninitialized, keeping its
// term and vote.
func TestSnapshotStagedApply(t *testing.T) {
	defer func(c, a int) { SnapshotChunkBytes, SnapshotApplyBatchBytes = c, a }(SnapshotChunkBytes, SnapshotApplyBatchBytes)
	SnapshotChunkBytes, SnapshotApplyBatchBytes = 8<<10, 64<<10

	desc := &rpcpb.RangeDescriptor{RangeId: 7, StartKey: keys.UserKey(nil), EndKey: keys.MaxKey,
		Replicas: []*rpcpb.ReplicaDescriptor{{NodeId: 1}, {NodeId: 2}}}
	sender := newSnapshotHost(t, "")
	fillRange(t, sender.eng, 300, 1000, 1)
	{
		b := sender.eng.NewWriteBatch()
		if err := writeDesc(b, desc); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	ssm := &rangeSM{n: sender, rangeID: 7}
	ssm.setDesc(desc)
	data, err := ssm.SnapshotData(sender.eng.NewSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 1024 {
		t.Fatalf("snapshot data is %d bytes: the pairs must not travel in it", len(data))
	}
	// Writes after the snapshot are not in it.
	fillRange(t, sender.eng, 310, 10, 1000)
	st, _, err := snapshotState(data)
	if err != nil {
		t.Fatal(err)
	}
	o := sender.reg.take(st.StreamId)
	if o == nil {
		t.Fatal("the engine snapshot is not registered")
	}
	want := spanPairs(t, o.snap, desc)

	// Stage the chunks as the receiver does.
	dir := t.TempDir()
	path := filepath.Join(dir, "r7-i10-x.snap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	count, _, err := streamPairs(o, func(chunk []byte) error {
		if len(chunk) > SnapshotChunkBytes+2000 {
			t.Fatalf("chunk of %d bytes", len(chunk))
		}
		chunks++
		n, err := countPairs(chunk)
		if err != nil || n == 0 {
			t.Fatalf("chunk without whole pairs: %d, %v", n, err)
		}
		_, err = f.Write(chunk)
		return err
	})
	o.snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.Stat()
	_ = f.Close()
	stagedCopy, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if count != uint64(len(want)) || chunks < 30 {
		t.Fatalf("%d pairs in %d chunks, want %d pairs in many chunks", count, chunks, len(want))
	}
	staged := &rpcpb.RangeState{Range: desc, StagedFile: path, StagedBytes: uint64(info.Size())}
	sdata, err := encodeSnapshotHeader(staged)
	if err != nil {
		t.Fatal(err)
	}

	// The receiver has stale data of its own in the span, and Raft state.
	recvDir := t.TempDir()
	recv := newSnapshotHost(t, recvDir)
	fillRange(t, recv.eng, 500, 20, 1)
	{
		b := recv.eng.NewWriteBatch()
		hs, _ := (&raftpb.HardState{Term: 9, Vote: 2, Commit: 40}).Marshal()
		_ = b.Set(storage.RangeLocalKey(7, storage.SuffixHardState), hs)
		_ = b.Set(storage.RangeLocalKey(7, storage.SuffixApplied), make([]byte, 16))
		_ = b.Set(registryKey(7), nil)
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	rsm := &rangeSM{n: recv, rangeID: 7}
	b := recv.eng.NewWriteBatch()
	if _, err := rsm.ApplySnapshot(b, sdata); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staged file is still there: %v", err)
	}
	if _, err := recv.eng.Get(snapshotMarkerKey(7)); err != nil {
		t.Fatalf("before the Ready's batch commits, the marker must be on disk: %v", err)
	}

	// The node stops here: the Ready's batch never commits.
	b.Close()
	if err := recoverSnapshotApplies(recv.eng, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if got := spanPairs(t, recv.eng, desc); len(got) != 0 {
		t.Fatalf("after recovery the span holds %d pairs, want none", len(got))
	}
	for _, k := range [][]byte{snapshotMarkerKey(7), registryKey(7), storage.RangeLocalKey(7, storage.SuffixApplied)} {
		if _, err := recv.eng.Get(k); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("after recovery %x is still there (%v)", k, err)
		}
	}
	hb, err := recv.eng.Get(storage.RangeLocalKey(7, storage.SuffixHardState))
	if err != nil {
		t.Fatal(err)
	}
	var hs raftpb.HardState
	if err := hs.Unmarshal(hb); err != nil || hs.Term != 9 || hs.Vote != 2 || hs.Commit != 0 {
		t.Fatalf("hard state after recovery %+v (%v), want term 9 vote 2 commit 0", hs, err)
	}

	// Applied again and committed: the receiver holds exactly the
	// snapshot's pairs.
	if err := os.WriteFile(path, stagedCopy, 0o644); err != nil {
		t.Fatal(err)
	}
	b = recv.eng.NewWriteBatch()
	defer b.Close()
	if _, err := rsm.ApplySnapshot(b, sdata); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	got := spanPairs(t, recv.eng, desc)
	if len(got) != len(want) {
		t.Fatalf("receiver holds %d pairs, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("pair %x differs", k)
		}
	}
	if _, err := recv.eng.Get(snapshotMarkerKey(7)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the marker outlives the apply: %v", err)
	}
}
