package kvserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestAsyncConsensusAndQueryIntent checks the server side of pipelining: a
// batch of PutIntents sent with async_consensus is answered once proposed,
// and a QueryIntent sent right after proves it (waiting for the write in
// flight); a proof with another value or another transaction fails; other
// requests may not ask for async consensus.
func TestAsyncConsensusAndQueryIntent(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRaw(t, c.Addrs())
	key := keys.UserKey([]byte("pipelined"))
	lk, err := rc.conns[c.Addrs()[0]].RangeLookup(context.Background(), &rpcpb.RangeLookupRequest{Key: key})
	if err != nil || lk.Error != nil {
		t.Fatalf("lookup: %v %v", err, lk.GetError())
	}
	// Send to the leaseholder directly, with async consensus.
	var target string
	for _, n := range lk.Nodes {
		if n.NodeId == lk.LeaseholderNodeId {
			target = n.Address
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var resp *rpcpb.BatchResponse
	for {
		resp, err = rc.conns[target].Batch(ctx, &rpcpb.BatchRequest{RangeId: lk.Range.RangeId, AsyncConsensus: true,
			Requests: []*rpcpb.RequestUnion{putIntent("pipelined", 77)}})
		if err == nil && resp.Error == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("async put intent: %v %v", err, resp.GetError())
		}
		time.Sleep(20 * time.Millisecond)
	}
	query := func(txn uint64, value string) bool {
		t.Helper()
		r := rc.send(key, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_QueryIntent{QueryIntent: &rpcpb.QueryIntentRequest{
			Key: key, TxnStart: txn, ValueHash: rpcpb.IntentValueHash([]byte(value), false)}}})
		if r.Error != nil {
			t.Fatalf("query intent: %v", r.Error)
		}
		return r.Responses[0].GetQueryIntent().GetFound()
	}
	if !query(77, "v") {
		t.Fatal("the pipelined write was not proven")
	}
	if query(77, "other") || query(78, "v") {
		t.Fatal("a proof with another value or transaction succeeded")
	}
	r, err := rc.conns[target].Batch(ctx, &rpcpb.BatchRequest{RangeId: lk.Range.RangeId, AsyncConsensus: true,
		Requests: []*rpcpb.RequestUnion{put("x", "y")}})
	if err != nil || r.Error.GetCode() != rpcpb.ErrorCode_INVALID_ARGUMENT {
		t.Fatalf("async consensus for a Put: %v %v, want INVALID_ARGUMENT", err, r.GetError())
	}
}
