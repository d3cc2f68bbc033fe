package testcluster_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// rawBatch sends req to the node at addr and returns its response.
func rawBatch(t *testing.T, addr string, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	resp, err := rpcpb.NewKVClient(cc).Batch(ctx, req)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	return resp
}

// TestProtocolRefusals: a node refuses, with PROTOCOL_NOT_RUN and before
// evaluating anything, transactional requests of a protocol its cluster
// does not run and requests its protocol does not use; requests outside
// transactions are served whatever protocol they name. The client turns
// the refusal into *client.ProtocolError (ErrInvalidArgument), and a
// transaction naming a protocol this client does not implement fails at
// Begin the same way.
func TestProtocolRefusals(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 1})
	db := openDB(t, c)
	if got := db.Protocol(); got != client.ProtocolDefault {
		t.Fatalf("Protocol() = %q, want default", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	// A hierarchy transaction in a default cluster: its read is refused,
	// and so is its commit (Hierarchy.Commit).
	htxn, err := db.Begin(ctx, client.WithProtocol(client.ProtocolHierarchyLocking))
	if err != nil {
		t.Fatalf("Begin(hierarchy-locking): %v", err)
	}
	_, _, err = htxn.Get(ctx, []byte("k"))
	var pe *client.ProtocolError
	if !errors.As(err, &pe) || !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("hierarchy-locking Get in a default cluster = %v, want a *ProtocolError wrapping ErrInvalidArgument", err)
	}
	_ = htxn.Rollback(ctx)
	htxn, err = db.Begin(ctx, client.WithProtocol(client.ProtocolHierarchyTimestamps))
	if err != nil {
		t.Fatalf("Begin(hierarchy-timestamps): %v", err)
	}
	if err := htxn.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("hierarchy-timestamps Put (buffered): %v", err)
	}
	if err := htxn.Commit(ctx); !errors.As(err, &pe) {
		t.Fatalf("hierarchy-timestamps Commit in a default cluster = %v, want a *ProtocolError", err)
	}

	key := keys.UserKey([]byte("k"))
	txn := &rpcpb.TxnMeta{StartTs: 1}
	putIntent := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{Key: key, Value: []byte("v"), Txn: txn}}}
	prepare := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Prepare{Prepare: &rpcpb.PrepareRequest{Txn: txn, Writes: []*rpcpb.OnePCWrite{{Key: key, Value: []byte("v")}}}}}
	lockingGet := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: key, TxnStart: 1, Lock: true}}}
	put := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: key, Value: []byte("v")}}}
	for _, tc := range []struct {
		name     string
		protocol string
		ru       *rpcpb.RequestUnion
		refused  bool
	}{
		{"intent of a 2pc-locking transaction", "2pc-locking", putIntent, true},
		{"prepare in a default cluster", "", prepare, true},
		{"locking read in a default cluster", "", lockingGet, true},
		{"unknown protocol", "3pc", putIntent, true},
		{"non-transactional put naming 2pc-locking", "2pc-locking", put, false},
	} {
		resp := rawBatch(t, c.Addrs()[0], &rpcpb.BatchRequest{RangeId: 1, Requests: []*rpcpb.RequestUnion{tc.ru}, Protocol: tc.protocol})
		got := resp.GetError().GetCode() == rpcpb.ErrorCode_PROTOCOL_NOT_RUN
		if got != tc.refused {
			t.Errorf("%s: error %v, want refused=%v", tc.name, resp.GetError(), tc.refused)
		}
	}
	// The default protocol's transactions run as before.
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.Put(ctx, []byte("k"), []byte("v"))
	}); err != nil {
		t.Fatalf("default transaction: %v", err)
	}
}
