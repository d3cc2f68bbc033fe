package eval

import (
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPutWaitsForReplicatedSharedLock: on a 2pc-locking cluster
// (Context.SharedLocks) a non-transactional Put of a key whose record
// holds another transaction's replicated shared lock (a Prepare's, for a
// key it read) is INTENT_FOUND naming that transaction, marked shared,
// and writes nothing; without shared locks to respect, or once the lock
// is dropped, it writes.
func TestPutWaitsForReplicatedSharedLock(t *testing.T) {
	eng, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	key := keys.UserKey([]byte("x"))
	desc := &rpcpb.RangeDescriptor{RangeId: 2, StartKey: keys.UserKey(nil), EndKey: keys.MaxKey}
	var rec keyRecord
	if err := rec.share(42); err != nil {
		t.Fatal(err)
	}
	b := eng.NewBatch()
	if err := storeKeyRecord(b, key, rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
	put := func(c Context) *rpcpb.Error {
		b := eng.NewBatch()
		defer b.Close()
		ru := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: key, Value: []byte("v")}}}
		_, e := evalPut(c, b, ru, &Effects{})
		if e == nil {
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	e := put(Context{Desc: desc, WriteTs: 100, SharedLocks: true})
	if e.GetCode() != rpcpb.ErrorCode_INTENT_FOUND || len(e.Intents) != 1 || e.Intents[0].GetTxn().GetStartTs() != 42 || !e.Intents[0].GetShared() {
		t.Fatalf("put under a shared lock: %v, want INTENT_FOUND naming shared holder 42", e)
	}
	if e := put(Context{Desc: desc, WriteTs: 100}); e != nil {
		t.Fatalf("put without shared locks to respect: %v", e)
	}
	rec.unshare(42)
	b = eng.NewBatch()
	if err := storeKeyRecord(b, key, rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if e := put(Context{Desc: desc, WriteTs: 200, SharedLocks: true}); e != nil {
		t.Fatalf("put once the lock is dropped: %v", e)
	}
}
