package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestLimitsAreInvalidArgument checks, against a real cluster, that input
// over a limit is refused with client.ErrInvalidArgument whose message
// names the limit, that nothing of a refused transaction is written, and
// that the nodes themselves refuse oversize keys, values and requests
// with INVALID_ARGUMENT naming the limit (a client that skipped its own
// checks is stopped there).
func TestLimitsAreInvalidArgument(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()

	bigKey := []byte(strings.Repeat("k", keys.KeyBytesMax+1))
	bigValue := make([]byte, keys.ValueBytesMax+1)
	okKey := []byte("limits/ok")
	wantInvalid := func(what, limit string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", what, err)
			return
		}
		if !strings.Contains(err.Error(), limit) {
			t.Errorf("%s: %q does not name the limit %s", what, err, limit)
		}
	}

	// Single-key operations.
	wantInvalid("Put with an oversize key", "KeyBytesMax", db.Put(ctx, bigKey, []byte("v")))
	wantInvalid("Delete with an oversize key", "KeyBytesMax", db.Delete(ctx, bigKey))
	_, _, err := db.Get(ctx, bigKey)
	wantInvalid("Get with an oversize key", "KeyBytesMax", err)
	wantInvalid("Put with an oversize value", "ValueBytesMax", db.Put(ctx, okKey, bigValue))
	// The limits are inclusive: exactly at the limit is accepted.
	atLimitKey := []byte(strings.Repeat("m", keys.KeyBytesMax))
	if err := db.Put(ctx, atLimitKey, []byte("v")); err != nil {
		t.Errorf("Put with a key of exactly KeyBytesMax bytes: %v", err)
	}

	// Inside a transaction: DB.Txn returns the error without retrying, and
	// the transaction's earlier writes are not visible.
	attempts := 0
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		attempts++
		if err := txn.Put(ctx, okKey, []byte("written before the oversize value")); err != nil {
			return err
		}
		return txn.Put(ctx, []byte("limits/big"), bigValue)
	})
	wantInvalid("Txn.Put with an oversize value", "ValueBytesMax", err)
	if attempts != 1 {
		t.Errorf("DB.Txn ran the closure %d times after ErrInvalidArgument, want 1", attempts)
	}
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		_, _, err := txn.Get(ctx, bigKey)
		return err
	})
	wantInvalid("Txn.Get with an oversize key", "KeyBytesMax", err)

	// Too many keys in one transaction. The default limit is
	// keys.TxnKeysMax (10,000 keys); writing that many intents would take
	// most of this package's time budget, so the client is configured with
	// a lower TxnKeysMax: the same check, at a smaller number.
	const keysMax = 8
	small := openDB(t, c, client.WithOptions(client.Options{TxnKeysMax: keysMax}))
	err = small.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		for i := 0; i <= keysMax; i++ {
			if err := txn.Put(ctx, []byte(fmt.Sprintf("limits/many/%02d", i)), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	wantInvalid(fmt.Sprintf("a transaction writing %d keys", keysMax+1), "TxnKeysMax", err)
	// Rewriting a key already in the write set is not a new key.
	err = small.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		for i := 0; i <= 2*keysMax; i++ {
			if err := txn.Put(ctx, []byte(fmt.Sprintf("limits/same/%02d", i%keysMax)), []byte(fmt.Sprint(i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("a transaction writing %d keys, some twice: %v", keysMax, err)
	}
	// Nothing of the refused transactions was written.
	for _, k := range [][]byte{okKey, []byte("limits/big"), []byte("limits/many/00"), []byte(fmt.Sprintf("limits/many/%02d", keysMax-1))} {
		if v, found, err := db.Get(ctx, k); err != nil || found {
			t.Errorf("%q after refused transactions: found %v (%q), err %v; want absent", k, found, v, err)
		}
	}

	// The nodes enforce the limits too: raw requests, without the client.
	conn, err := grpc.NewClient(c.Addrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := rpcpb.NewKVClient(conn)
	rawPut := func(key, value []byte) *rpcpb.RequestUnion {
		return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: key, Value: value}}}
	}
	serverWantInvalid := func(what, limit string, reqs ...*rpcpb.RequestUnion) {
		t.Helper()
		lk, err := kv.RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: keys.UserKey(okKey)})
		if err != nil || lk.GetError() != nil {
			t.Fatalf("range lookup: %v %v", err, lk.GetError())
		}
		resp, err := kv.Batch(ctx, &rpcpb.BatchRequest{RangeId: lk.GetRange().GetRangeId(), Requests: reqs})
		if err != nil {
			t.Errorf("%s: transport error %v, want INVALID_ARGUMENT", what, err)
			return
		}
		e := resp.GetError()
		if e.GetCode() != rpcpb.ErrorCode_INVALID_ARGUMENT || !strings.Contains(e.GetMessage(), limit) {
			t.Errorf("%s: server answered %v, want INVALID_ARGUMENT naming %s", what, e, limit)
		}
	}
	// The server allows 64 bytes of prefix above KeyBytesMax for system
	// keys; this key is above that too.
	serverKey := keys.UserKey([]byte(strings.Repeat("s", keys.KeyBytesMax+100)))
	serverWantInvalid("raw Put with an oversize key", "KeyBytesMax", rawPut(serverKey, []byte("v")))
	serverWantInvalid("raw Put with an oversize value", "ValueBytesMax", rawPut(keys.UserKey(okKey), bigValue))
	var many []*rpcpb.RequestUnion
	for i := 0; i*keys.ValueBytesMax <= keys.RequestBytesMax; i++ {
		many = append(many, rawPut(keys.UserKey([]byte(fmt.Sprintf("limits/req/%02d", i))), make([]byte, keys.ValueBytesMax)))
	}
	serverWantInvalid(fmt.Sprintf("a raw batch of %d values of ValueBytesMax", len(many)), "RequestBytesMax", many...)
}
