package kvserver_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestReplicaCreatedAcrossSplit: a replica of a split's right hand side
// created for a peer's message while the split applies on the same node
// must load either nothing (then the split replaces it) or the split's
// whole state, never the split's Raft state without its descriptor.
//
// The hooks order it on n3: a message for the new range arrives before n3
// applies the split; its replica's creation reads "no descriptor", then
// waits until n3's split batch has committed, and only then reads the
// Raft state. Before the fix that state was read from the live engine:
// the replica took part in Raft with no descriptor and refused every
// command the others applied (I5 broken; found by TestSerializableListAppend
// once in about 150 runs).
func TestReplicaCreatedAcrossSplit(t *testing.T) {
	const target = 3
	var armed atomic.Bool
	var rightID atomic.Uint64
	raced := make(chan struct{})
	var racedOnce sync.Once
	var setupErr atomic.Value
	restore := kvserver.SetTestingHooks(
		func(n *kvserver.Node, rangeID uint64, desc *rpcpb.RangeDescriptor) {
			if !armed.Load() || n.NodeID() != target || desc != nil || rangeID != rightID.Load() {
				return
			}
			racedOnce.Do(func() { close(raced) })
			// Wait for this node's split to commit the range's state.
			key := storage.RangeLocalKey(rangeID, storage.SuffixDescriptor)
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if _, err := n.Engine().Get(key); err == nil {
					return
				}
			}
			setupErr.Store("the split never committed on n3 while a replica was being created")
		},
		func(n *kvserver.Node, id uint64) {
			rightID.Store(id)
			if !armed.Load() || n.NodeID() != target {
				return
			}
			select {
			case <-raced:
			case <-time.After(10 * time.Second):
				setupErr.Store("no message for the new range reached n3 before its split")
			}
		})
	defer restore()
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRaw(t, c.Addrs())
	if resp := rc.send(keys.UserKey([]byte("a")), put("a", "v-a")); resp.Error != nil {
		t.Fatalf("put a: %v", resp.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	armed.Store(true)
	sr, err := rc.conns[c.Addrs()[0]].Split(ctx, &rpcpb.SplitRequest{SplitKey: keys.UserKey([]byte("m"))})
	if err != nil || sr.Error != nil {
		t.Fatalf("split: %v %v", err, sr.GetError())
	}
	for _, k := range []string{"q", "z"} {
		if resp := rc.send(keys.UserKey([]byte(k)), put(k, "v-"+k)); resp.Error != nil {
			t.Fatalf("put %s: %v", k, resp.Error)
		}
	}
	select {
	case <-raced:
	default:
		t.Fatalf("the race was not set up: %v", setupErr.Load())
	}
	if e := setupErr.Load(); e != nil {
		t.Fatal(e)
	}
	armed.Store(false)
	n, err := c.CheckReplicas(ctx)
	if errors.Is(err, testcluster.ErrReplicasDiverged) {
		t.Fatalf("I5: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("I5 holds on %d ranges", n)
}
