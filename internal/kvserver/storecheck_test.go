package kvserver

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestOpenStoreRefusesDamage writes, for each case, a store whose state
// raft.NewRawNode or a heartbeat would panic on (or that silently lost its
// identity), and checks that openStore refuses it with one line naming the
// store and the problem, wrapping ErrStoreDamaged; a healthy store opens
// and gets its identity file.
func TestOpenStoreRefusesDamage(t *testing.T) {
	ident := &rpcpb.JoinRequest{NodeId: 3, Settings: &rpcpb.ClusterSettings{ClusterId: "c0ffee"}}
	const rangeID = 7
	desc := &rpcpb.RangeDescriptor{RangeId: rangeID, StartKey: []byte("a"), EndKey: []byte("b"),
		Replicas: []*rpcpb.ReplicaDescriptor{{NodeId: 1}, {NodeId: 2}, {NodeId: 3}}}
	// writeRange writes a range at replica.InitialIndex with hard state hs.
	writeRange := func(b *storage.Batch, hs raftpb.HardState) {
		if err := writeDesc(b, desc); err != nil {
			t.Fatal(err)
		}
		if err := replica.WriteInitialState(b, rangeID, voters(desc), hs); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(registryKey(rangeID), nil); err != nil {
			t.Fatal(err)
		}
	}
	writeIdent := func(b *storage.Batch) {
		v, err := proto.Marshal(ident)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Set(nodeIdentKey, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// setup writes into the engine's batch and the directory.
		setup func(t *testing.T, b *storage.Batch, dir string)
		want  string // "" for a healthy store
	}{
		{"healthy", func(t *testing.T, b *storage.Batch, dir string) {
			writeIdent(b)
			writeRange(b, raftpb.HardState{})
		}, ""},
		{"commit beyond the log", func(t *testing.T, b *storage.Batch, dir string) {
			writeIdent(b)
			writeRange(b, raftpb.HardState{Term: 6, Commit: 76})
		}, "range r7: its Raft state says index 76 is committed but its log ends at 10"},
		{"commit index behind the applied one", func(t *testing.T, b *storage.Batch, dir string) {
			// Healthy: a HardState whose commit index alone changed is
			// not written, so the stored one may lag what was applied.
			writeIdent(b)
			writeRange(b, raftpb.HardState{Term: 6})
			hb, err := (&raftpb.HardState{Term: 6, Commit: 3}).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Set(storage.RangeLocalKey(rangeID, storage.SuffixHardState), hb); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"applied beyond the log", func(t *testing.T, b *storage.Batch, dir string) {
			writeIdent(b)
			writeRange(b, raftpb.HardState{Term: 6})
			applied := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 12), 6)
			if err := b.Set(storage.RangeLocalKey(rangeID, storage.SuffixApplied), applied); err != nil {
				t.Fatal(err)
			}
		}, "range r7: its Raft state says index 12 is applied but its log ends at 10"},
		{"damaged part record", func(t *testing.T, b *storage.Batch, dir string) {
			writeIdent(b)
			writeRange(b, raftpb.HardState{})
			if err := b.Set(hierPartRecordKey(5), []byte{0xff}); err != nil {
				t.Fatal(err)
			}
		}, "its hierarchy part records do not read back"},
		{"ranges without identity", func(t *testing.T, b *storage.Batch, dir string) {
			writeRange(b, raftpb.HardState{})
		}, "it holds 1 ranges but no node identity"},
		{"identity file without identity", func(t *testing.T, b *storage.Batch, dir string) {
			if err := os.WriteFile(filepath.Join(dir, StoreIdentFile), []byte("cluster c0ffee node n3\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "its node identity (cluster c0ffee node n3) is missing from its data"},
		{"identity of another node", func(t *testing.T, b *storage.Batch, dir string) {
			writeIdent(b)
			if err := os.WriteFile(filepath.Join(dir, StoreIdentFile), []byte("cluster c0ffee node n2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "its data belongs to cluster c0ffee node n3, its STORE-IDENT file to cluster c0ffee node n2"},
		{"marked damaged", func(t *testing.T, b *storage.Batch, dir string) {
			writeIdent(b)
			if err := os.WriteFile(filepath.Join(dir, StoreDamagedFile), []byte("2026-01-01T00:00:00Z: range r7: lost writes\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "it was found damaged while the node ran: 2026-01-01T00:00:00Z: range r7: lost writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			eng, err := storage.Open(dir, storage.Options{})
			if err != nil {
				t.Fatal(err)
			}
			b := eng.NewBatch()
			tc.setup(t, b, dir)
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			eng, err = openStore(dir, storage.Options{})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("healthy store refused: %v", err)
				}
				_ = eng.Close()
				got, err := os.ReadFile(filepath.Join(dir, StoreIdentFile))
				if err != nil || string(got) != "cluster c0ffee node n3\n" {
					t.Fatalf("identity file: %q, %v", got, err)
				}
				return
			}
			if err == nil {
				_ = eng.Close()
				t.Fatalf("store opened; want a refusal containing %q", tc.want)
			}
			msg := err.Error()
			if !errors.Is(err, ErrStoreDamaged) || !strings.Contains(msg, tc.want) ||
				!strings.HasPrefix(msg, "store "+dir+" is damaged: ") || !strings.Contains(msg, damagedAdvice) ||
				strings.Contains(msg, "\n") {
				t.Fatalf("refusal:\n%s\nwant one line, ErrStoreDamaged, containing %q and the advice", msg, tc.want)
			}
		})
	}
}

// TestPersistedLastIndex checks the two-key reading of a range's last
// index against replica.Inspect, which reads the whole log.
func TestPersistedLastIndex(t *testing.T) {
	eng, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if got, err := persistedLastIndex(eng, 4); err != nil || got != 0 {
		t.Fatalf("no state: %d, %v; want 0", got, err)
	}
	b := eng.NewBatch()
	if err := replica.WriteInitialState(b, 4, []uint64{1}, raftpb.HardState{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	check := func(want uint64) {
		t.Helper()
		got, err := persistedLastIndex(eng, 4)
		info, ierr := replica.Inspect(eng, 4)
		if err != nil || ierr != nil || got != want || info.LastIndex != want {
			t.Fatalf("last index %d (%v), Inspect %d (%v); want %d", got, err, info.LastIndex, ierr, want)
		}
	}
	check(replica.InitialIndex)
	b = eng.NewBatch()
	for i := uint64(replica.InitialIndex + 1); i <= replica.InitialIndex+3; i++ {
		e := raftpb.Entry{Index: i, Term: replica.InitialTerm}
		v, _ := e.Marshal()
		if err := b.Set(storage.RaftLogKey(4, i), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	check(replica.InitialIndex + 3)
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\nb\n\nc <corruption detail carrier>\n"); got != "a; b; c" {
		t.Fatalf("oneLine = %q", got)
	}
	long := strings.Repeat("x", oneLineMax+10)
	if got := oneLine(long + "\n" + long); len(got) > oneLineMax+20 || strings.Contains(got, "\n") {
		t.Fatalf("oneLine of a long message: %d bytes", len(got))
	}
}
