package kvserver_test

import (
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
)

func putIntent(k string, txn uint64) *rpcpb.RequestUnion {
	return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
		Key: keys.UserKey([]byte(k)), Value: []byte("v"), Txn: &rpcpb.TxnMeta{StartTs: txn}}}}
}

func resolve(k string, txn, commit uint64) *rpcpb.RequestUnion {
	return &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{
		Key: keys.UserKey([]byte(k)), TxnStart: txn, CommitTs: commit}}}
}

// waitingNode starts a one-node cluster whose requests wait up to an hour
// for the intents they meet, and returns a raw client of it and the node.
func waitingNode(t *testing.T) (*rawClient, *kvserver.Node) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Nodes: 1, LockWaitMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return newRaw(t, c.Addrs()), c.Node(0)
}

// TestIntentWaiters checks the leaseholder's lock table: a write that meets
// another transaction's intent waits and is woken when that intent is
// resolved (it then succeeds instead of returning the conflict), and two
// transactions that wait for each other's intents are told apart at once:
// the younger gets DEADLOCK.
func TestIntentWaiters(t *testing.T) {
	rc, n := waitingNode(t)
	awaitWaiters := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for n.LockWaiters() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests waiting for intents, want %d", n.LockWaiters(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	key := func(k string) []byte { return keys.UserKey([]byte(k)) }

	// Wake-up: txn 20 waits for txn 10's intent on a; txn 10 commits at 15.
	if r := rc.send(key("a"), putIntent("a", 10)); r.Error != nil {
		t.Fatal(r.Error)
	}
	done := make(chan *rpcpb.BatchResponse, 1)
	go func() { done <- rc.send(key("a"), putIntent("a", 20)) }()
	awaitWaiters(1)
	if r := rc.send(key("a"), resolve("a", 10, 15)); r.Error != nil {
		t.Fatal(r.Error)
	}
	if r := <-done; r.Error != nil {
		t.Fatalf("the waiter was not woken into success: %v", r.Error)
	}

	// Deadlock: 30 holds b, 40 holds c; 30 waits for c, then 40 for b.
	for _, w := range []struct {
		k   string
		txn uint64
	}{{"b", 30}, {"c", 40}} {
		if r := rc.send(key(w.k), putIntent(w.k, w.txn)); r.Error != nil {
			t.Fatal(r.Error)
		}
	}
	older := make(chan *rpcpb.BatchResponse, 1)
	go func() { older <- rc.send(key("c"), putIntent("c", 30)) }()
	awaitWaiters(1)
	r := rc.send(key("b"), putIntent("b", 40))
	if r.Error == nil || r.Error.Code != rpcpb.ErrorCode_DEADLOCK {
		t.Fatalf("the younger transaction of a cycle of waits got %v, want DEADLOCK", r.Error)
	}
	// The victim gives way: its intent on c is removed, and the older
	// transaction, still waiting, is woken into success.
	if r := rc.send(key("c"), resolve("c", 40, 0)); r.Error != nil {
		t.Fatal(r.Error)
	}
	if r := <-older; r.Error != nil {
		t.Fatalf("the older transaction after the victim gave way: %v", r.Error)
	}
}

// TestPutAfterCachedKeyMeetsIntent: Puts of a key that the leaseholder's
// key cache knows (keystates.go) still meet an intent written after it
// learned the key: the Put waits for the intent, as a Put that read the
// key would, and lands once the intent is resolved.
func TestPutAfterCachedKeyMeetsIntent(t *testing.T) {
	rc, n := waitingNode(t)
	k := keys.UserKey([]byte("k"))
	var last uint64
	for _, v := range []string{"v1", "v2", "v3"} { // the first reads k, the others use the cache
		r := rc.send(k, put("k", v))
		if r.Error != nil {
			t.Fatal(r.Error)
		}
		last = r.Responses[0].GetPut().GetTs()
	}
	txn := last + 1
	if r := rc.send(k, putIntent("k", txn)); r.Error != nil {
		t.Fatal(r.Error)
	}
	done := make(chan *rpcpb.BatchResponse, 1)
	go func() { done <- rc.send(k, put("k", "after")) }()
	deadline := time.Now().Add(30 * time.Second)
	for n.LockWaiters() != 1 {
		select {
		case r := <-done:
			t.Fatalf("a Put of a cached key did not wait for the intent written since: %v", r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the Put is not waiting for the intent")
		}
		time.Sleep(time.Millisecond)
	}
	if r := rc.send(k, resolve("k", txn, 0)); r.Error != nil {
		t.Fatal(r.Error)
	}
	if r := <-done; r.Error != nil {
		t.Fatalf("the Put after the intent was resolved: %v", r.Error)
	}
	r := rc.send(k, get("k"))
	if r.Error != nil || string(r.Responses[0].GetGet().GetValue()) != "after" {
		t.Fatalf("read %v, want the last Put's value", r)
	}
}
